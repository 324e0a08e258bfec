import Dispatch
import Foundation

/// A plain TCP client for tests that must send what no HTTP client would (cut bodies, bad
/// chunks, odd heads). A blocking receive runs on a thread of its own, never on the Swift
/// concurrency pool the daemon's tasks need nor on Dispatch's small worker pool (tests
/// run in parallel); every receive is bounded by `timeout`.
public final class RawSocket: @unchecked Sendable {
    // @unchecked: `fd` is set once in init and only read afterwards; the socket calls on it
    // are thread-safe, and each test uses one RawSocket from one task at a time.
    private let fd: Int32

    public init(port: Int, timeout: Duration = .seconds(5)) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var tv = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
    }

    deinit { close(fd) }

    public func send(_ text: String) { send(Array(text.utf8)) }

    public func send(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Foundation.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }

    /// Half-closes: the server sees EOF on its read side and may still answer.
    public func shutdownWrite() {
        shutdown(fd, Int32(SHUT_WR))
    }

    /// Reads until the server closes, the timeout passes without data, or `until` holds.
    public func receive(until done: @escaping @Sendable (String) -> Bool = { _ in false }) async -> String {
        // The closure holds `self`, so the socket is not closed (deinit) while it reads.
        await withCheckedContinuation { continuation in
            Thread { [self] in
                var collected: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = recv(fd, &buffer, buffer.count, 0)
                    if n <= 0 { break }
                    collected += buffer[0..<n]
                    if done(String(decoding: collected, as: UTF8.self)) { break }
                }
                continuation.resume(returning: String(decoding: collected, as: UTF8.self))
            }.start()
        }
    }

    /// Sends a whole request text and returns everything until the server closes or the
    /// timeout passes.
    public static func exchange(_ text: String, port: Int, halfClose: Bool = false, timeout: Duration = .seconds(5)) async throws -> String {
        let socket = try RawSocket(port: port, timeout: timeout)
        socket.send(text)
        if halfClose { socket.shutdownWrite() }
        return await socket.receive()
    }
}
