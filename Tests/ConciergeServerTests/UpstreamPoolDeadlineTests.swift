import Foundation
import NIOCore
import Testing

@testable import ConciergeServer

extension UpstreamPoolTests {
    @Test("a connect the request's deadline cuts short (its wait took the rest) is a timeout (504), not an unreachable upstream (502)")
    func connectCutByDeadline() async throws {
        let port = try FullBacklogPort()
        defer { port.close() }
        try await withPool(connectTimeout: .seconds(120)) { pool in
            // The connect hangs (the SYN is dropped); the pool's connect timeout (120 s) is far
            // longer than what is left of the request's 300 ms, so the deadline ends the connect
            // (well within a minute however loaded the machine).
            let started = ContinuousClock.now
            let result = await send(pool, request("http://127.0.0.1:\(port.port)/x", timeout: .milliseconds(300)))
            #expect(Self.isTimeout(result), "\(result)")
            #expect(ContinuousClock.now - started < .seconds(60), "the deadline, not the connect timeout, ended it")
        }
    }
}

/// A loopback port whose accept queue is full and never drained: a new connection's SYN is
/// dropped, so its connect hangs until the caller gives up (an upstream that is slow to
/// accept).
final class FullBacklogPort: Sendable {
    let port: Int
    private let listener: Int32
    private let fillers: [Int32]

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        // A backlog of 0 holds one connection.
        guard fd >= 0, bound, listen(fd, 0) == 0 else {
            _ = Glibc.close(fd)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        // Two connections, non-blocking: the first fills the queue, the second is left waiting.
        fillers = (0..<2).map { _ in
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, length) } }
            return filler
        }
    }

    func close() {
        for filler in fillers { _ = Glibc.close(filler) }
        _ = Glibc.close(listener)
    }
}
