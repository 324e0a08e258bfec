import ConciergeCore
import ConciergeServer
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// SPEC §10 admin rules: every error reply is JSON; token-file problems are config errors
/// naming `admin.token_file`; a non-loopback admin bind is warned about.
@Suite("Fault injection: admin")
struct AdminFaultTests {
    @Test("unknown routes, wrong methods, oversized and malformed bodies: every error reply is JSON {\"error\": ...}")
    func errorsAreJSON() async throws {
        try await ConciergeTestRig.with { rig in
            let unknown = try await rig.admin(.GET, "/nope")
            #expect(unknown.status == 404)
            #expect(unknown.header("Content-Type") == "application/json")
            #expect(unknown.json?[path: "error"]?.stringValue?.isEmpty == false)

            let wrongMethod = try await rig.admin(.POST, "/stats")
            #expect(wrongMethod.status >= 400)
            #expect(wrongMethod.json?[path: "error"]?.stringValue?.isEmpty == false)

            let malformed = try await ConciergeTestRig.send(.PUT, rig.adminURL + "/session",
                                                            headers: [("Authorization", "Bearer \(ConciergeTestRig.adminToken)")], body: "{not json")
            #expect(malformed.status == 400)
            #expect(malformed.json?[path: "error"]?.stringValue?.isEmpty == false)

            let huge = String(repeating: "x", count: 2 << 20)
            let tooLarge = try await ConciergeTestRig.send(.PUT, rig.adminURL + "/session",
                                                           headers: [("Authorization", "Bearer \(ConciergeTestRig.adminToken)")], body: huge)
            #expect(tooLarge.status == 413)
            #expect(tooLarge.json?[path: "error"]?.stringValue?.isEmpty == false)
        }
    }

    @Test("admin.token_file missing, empty, or readable by group/others is a config error naming the key; 0600 works")
    func tokenFileProblems() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-token-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func config(_ file: String) throws -> ConciergeConfig {
            try ConfigLoader.parse(yaml: "admin: { token_file: \(file) }\nstorage: { path: \(dir)/s.sqlite }\nupstreams: { a: http://127.0.0.1:1 }\n")
        }
        func problem(_ file: String) -> String? {
            do {
                _ = try ConciergeDaemon.adminToken(config(file))
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(problem(dir + "/missing.token")?.contains("admin.token_file") == true)
        #expect(problem(dir + "/missing.token")?.contains("does not exist") == true)

        let empty = dir + "/empty.token"
        _ = FileManager.default.createFile(atPath: empty, contents: Data("\n".utf8), attributes: [.posixPermissions: 0o600])
        #expect(problem(empty)?.contains("is empty") == true)

        let open = dir + "/open.token"
        _ = FileManager.default.createFile(atPath: open, contents: Data("secret\n".utf8), attributes: [.posixPermissions: 0o644])
        chmod(open, 0o644)
        #expect(problem(open)?.contains("readable by group or others") == true)

        let good = dir + "/good.token"
        _ = FileManager.default.createFile(atPath: good, contents: Data("secret\nignored\n".utf8), attributes: [.posixPermissions: 0o600])
        #expect(problem(good) == nil)
        #expect(try ConciergeDaemon.adminToken(config(good)) == "secret")

        // The daemon refuses to start on such a file, before touching storage.
        #expect(throws: ConfigError.self) { _ = try ConciergeDaemon(config: try config(empty), configPath: nil, logSink: LogSink(capturing: true), environment: [:]) }
        #expect(!FileManager.default.fileExists(atPath: dir + "/s.sqlite"))
    }

    @Test("serve exits 78 naming admin.token_file when the file is missing; check-config exits 78 on an empty or open one")
    func tokenFileExitCodes() async throws {
        let dir = try TempDir()
        let missing = dir.path + "/missing.yaml"
        try "admin: { token_file: \(dir.path)/none.token }\nstorage: { path: \(dir.path)/s.sqlite }\nupstreams: { a: http://127.0.0.1:1 }\n"
            .write(toFile: missing, atomically: true, encoding: .utf8)
        let serve = try await DaemonProcess.run([ProcessTests.binary, "serve", "--config", missing])
        #expect(serve.status == 78)
        #expect(serve.output.contains("admin.token_file"))
        #expect(!serve.output.contains("storage"))

        let emptyToken = dir.path + "/empty.token"
        _ = FileManager.default.createFile(atPath: emptyToken, contents: Data(), attributes: [.posixPermissions: 0o600])
        let empty = dir.path + "/empty.yaml"
        try "admin: { token_file: \(emptyToken) }\nupstreams: { a: http://127.0.0.1:1 }\n".write(toFile: empty, atomically: true, encoding: .utf8)
        let check = try await DaemonProcess.run([ProcessTests.binary, "check-config", "--config", empty])
        #expect(check.status == 78)
        #expect(check.output.contains("admin.token_file"))
    }

    @Test("an admin listener bound to a non-loopback address logs a warning")
    func nonLoopbackWarning() async throws {
        try await ConciergeTestRig.with(configTransform: { $0.replacingOccurrences(of: "  admin: 127.0.0.1:0\n", with: "  admin: 0.0.0.0:0\n") }) { rig in
            let warned = await eventually { rig.logText.contains("non-loopback") }
            #expect(warned)
        }
    }
}
