import ConciergeCore
import Foundation
import Testing

/// `upstreams.<name>` in its long form, `{ url, ca_file }`, beside the short form; a CA file
/// that cannot serve is a config error at its key path and line.
@Suite("Config: upstream CA files")
struct UpstreamCAFileConfigTests {
    static let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

    /// A file holding `text` in a fresh temp directory, removed after `body`.
    func withFile(_ text: String, _ body: (String) throws -> Void) throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ca-\(UUID().uuidString).pem").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        try body(path)
    }

    func issues(_ yaml: String) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.parse(yaml: yaml)
            Issue.record("expected a ConfigError")
            return []
        } catch {
            return error.issues
        }
    }

    @Test("the long form sets the URL and the CA file; the short form beside it has none")
    func longAndShortForm() throws {
        try withFile(Self.pem) { path in
            let config = try ConfigLoader.parse(yaml: """
                upstreams:
                  release: https://api.example.com
                  internal:
                    url: https://billing.internal:8443/v1
                    ca_file: \(path)
                """)
            #expect(config.upstreams.map(\.name) == ["release", "internal"])
            #expect(config.upstreams[0].caFile == nil)
            let billing = try #require(config.upstream(named: "internal"))
            #expect(billing.baseURL == "https://billing.internal:8443/v1")
            #expect(billing.port == 8443)
            #expect(billing.caFile == path)
        }
    }

    @Test("a missing CA file is an error naming upstreams.<name>.ca_file and its line")
    func missingFile() {
        let found = issues("""
            upstreams:
              internal:
                url: https://billing.internal
                ca_file: /nonexistent/\(UUID().uuidString).pem
            """)
        #expect(found.count == 1)
        #expect(found.first?.path == "upstreams.internal.ca_file")
        #expect(found.first?.line == 4)
        #expect(found.first?.message.contains("does not exist") == true)
    }

    @Test("a CA file without a PEM certificate, a directory, or one on an http upstream is an error")
    func unusableFiles() throws {
        try withFile("not a certificate") { path in
            let found = issues("upstreams:\n  internal: { url: \"https://billing.internal\", ca_file: \"\(path)\" }")
            #expect(found.map(\.path) == ["upstreams.internal.ca_file"])
            #expect(found.first?.message.contains("no PEM certificate") == true)
        }
        let directory = issues("upstreams:\n  internal: { url: \"https://billing.internal\", ca_file: \"\(NSTemporaryDirectory())\" }")
        #expect(directory.first?.message.contains("not a regular file") == true)
        try withFile(Self.pem) { path in
            let found = issues("upstreams:\n  plain: { url: \"http://127.0.0.1:9000\", ca_file: \"\(path)\" }")
            #expect(found.map(\.path) == ["upstreams.plain.ca_file"])
            #expect(found.first?.message.contains("https") == true)
        }
    }

    @Test("the long form needs url, and knows only url and ca_file")
    func longFormKeys() {
        let noURL = issues("upstreams:\n  internal: { ca_file: /etc/ssl/ca.pem }")
        #expect(noURL.contains { $0.path == "upstreams.internal" && $0.message.contains("url") })
        let unknown = issues("upstreams:\n  internal: { url: \"https://a.example\", cafile: /x.pem }")
        #expect(unknown.contains { $0.path == "upstreams.internal.cafile" && $0.message.contains("ca_file") })
        let badURL = issues("upstreams:\n  internal: { url: \"ftp://a.example\" }")
        #expect(badURL.map(\.path) == ["upstreams.internal.url"])
    }

    @Test("the loader lists the long form's keys under upstreams.<name>")
    func schemaKeys() {
        let keys = ConfigLoader.schemaKeys(yaml: "upstreams:\n  release: http://127.0.0.1:9000")
        #expect(keys["upstreams.<name>"] == ["url", "ca_file"])
    }
}
