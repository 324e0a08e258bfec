import ConciergeServerFuzzing
import Foundation
import NIOPosix
import Testing

/// The usual miss answered on the event loop against the same miss awaited in a task, over a
/// scripted upstream that can start exchanges on the loop: no sockets
/// (``MissPathComparison``; the fuzz target `misspaths` compares the same for any input).
@Suite("The loop miss and the awaited miss")
struct MissPathEquivalenceTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/corpus/misspaths").path

    /// Runs `body` with a comparison whose caches' writers run beside it.
    func withComparison(_ body: (MissPathComparison) async throws -> Void) async throws {
        let comparison = try MissPathComparison(loop: MultiThreadedEventLoopGroup.singleton.next())
        // After the writers ended, whether or not the body threw.
        defer { comparison.removeFiles() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await comparison.runWriters() }
            defer { comparison.finish() }
            try await body(comparison)
        }
    }

    @Test("the same reply bytes, report, upstream requests and stored entry for every endpoint, upstream behaviour, status and header")
    func grid() async throws {
        try await withComparison { comparison in
            var requests: [MissPathComparison.Request] = []
            for path in MissPathComparison.paths {
                for kind in 0..<MissPathComparison.kinds {
                    for status in [0, 4] {  // 200 and 500
                        requests.append(.init(path: path, kind: kind, status: status, text: "v\(kind)"))
                        requests.append(.init(path: path, kind: kind, status: status, text: "a b&c=ü", header: ("X-Client", "c1")))
                    }
                }
            }
            var notOnLoop: [String] = []
            for request in requests {
                switch await comparison.compare(request) {
                case .same: break
                case .notOnLoop: notOnLoop.append(request.description)
                case .differ(let difference): Issue.record("\(request): \(difference)")
                }
            }
            #expect(requests.count == 6 * 12 * 2 * 2)
            #expect(notOnLoop.isEmpty, "planned off the loop: \(notOnLoop)")
        }
    }

    @Test("the fuzz target's seed corpus: each input's request compares the same")
    func corpus() async throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.corpus).sorted()
        #expect(files.count >= 3)
        try await withComparison { comparison in
            for file in files {
                let data = try #require(FileManager.default.contents(atPath: Self.corpus + "/" + file))
                let request = ServerFuzzTargets.missPathRequest(Array(data))
                let outcome = await comparison.compare(request)
                #expect(outcome == .same, "\(file): \(request)")
            }
        }
    }
}
