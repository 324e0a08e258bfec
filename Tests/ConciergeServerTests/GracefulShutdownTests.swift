import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Synchronization
import Testing

/// SPEC §7: SIGTERM stops accepting and finishes the requests in flight, whole replies
/// included. Runs the real `concierge` binary in front of the sample API.
@Suite("Graceful shutdown of the real process")
struct GracefulShutdownTests {
    static let size = 20 * 1024 * 1024

    static func config(dir: String, apiPort: Int) -> String {
        """
        listen: { proxy: 127.0.0.1:0, admin: 127.0.0.1:0 }
        admin: { token: proc-token }
        storage: { path: \(dir)/state.sqlite }
        upstreams: { debug: http://127.0.0.1:\(apiPort) }
        endpoints:
          - name: download
            match: GET /api/download/*
            envelope: false
        limits: { shutdown_grace: 60s }

        """
    }

    @Test("SIGTERM during a 20 MB streamed download: the client receives every byte, then the process exits 0")
    func sigtermDuringStreamedDownload() async throws {
        let api = try await SampleAPI.start()
        let dir = try TempDir()
        let daemon = try DaemonProcess.start(binary: ProcessTests.binary, config: Self.config(dir: dir.path, apiPort: api.port))
        let ports = try await daemon.ports()
        let download = try SlowDownload(port: ports.proxy, path: "/api/download/file.bin?size=\(Self.size)")
        let finished = Task { await download.run() }

        #expect(await eventually(.seconds(15)) { download.progress.bodyBytes >= 64 * 1024 }, "no body bytes arrived")
        daemon.signal(SIGTERM)
        #expect(await eventually { daemon.output.contains("proxy stops accepting") })
        // The shutdown began with most of the body still to come.
        #expect(download.progress.bodyBytes < Self.size / 2)

        let result = await finished.value
        #expect(result.head.hasPrefix("HTTP/1.1 200"))
        #expect(result.head.lowercased().contains("content-length: \(Self.size)"))
        #expect(result.bodyBytes == Self.size)
        #expect(result.firstMismatch == nil, "byte \(result.firstMismatch ?? -1) is not i % 251")
        #expect(try await daemon.wait(limit: .seconds(30)) == 0)
        await api.shutdown()
    }
}

/// A client that reads one reply slowly (16 KB per read, a pause between reads) on a thread
/// of its own, checking the body against the sample API's pattern (byte i is `i % 251`) as
/// it arrives. Every read is bounded (10 s).
final class SlowDownload: Sendable {
    struct Progress: Sendable {
        var head = ""
        var bodyBytes = 0
        var firstMismatch: Int?
    }

    private let fd: Int32
    private let state = Mutex(Progress())

    init(port: Int, path: String) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        // (deinit closes the socket when init throws.)
        guard connected == 0 else { throw DaemonError("cannot connect to port \(port)") }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
        let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == request.count else { throw DaemonError("request not sent") }
    }

    deinit { close(fd) }

    var progress: Progress { state.withLock { $0 } }

    /// Reads until the server closes, a read times out, or the declared length has arrived.
    func run() async -> Progress {
        await withCheckedContinuation { continuation in
            Thread { [self] in
                readAll()
                continuation.resume(returning: progress)
            }.start()
        }
    }

    private func readAll() {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        var head: [UInt8] = []
        var length: Int?
        while length.map({ progress.bodyBytes < $0 }) ?? true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { return }
            var body = buffer[0..<n]
            if length == nil {
                head += body
                guard let end = head.firstRange(of: Array("\r\n\r\n".utf8)) else { continue }
                body = ArraySlice(head[end.upperBound...])
                let text = String(decoding: head[..<end.lowerBound], as: UTF8.self)
                state.withLock { $0.head = text }
                length = Self.contentLength(text) ?? 0
            }
            check(body)
            usleep(2_000)
        }
    }

    private func check(_ body: ArraySlice<UInt8>) {
        state.withLock { progress in
            if progress.firstMismatch == nil {
                for (offset, byte) in body.enumerated() where byte != UInt8((progress.bodyBytes + offset) % 251) {
                    progress.firstMismatch = progress.bodyBytes + offset
                    break
                }
            }
            progress.bodyBytes += body.count
        }
    }

    private static func contentLength(_ head: String) -> Int? {
        for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
            return Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }
}
