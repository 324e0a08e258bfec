import Foundation
import Synchronization

/// A raw TCP upstream on 127.0.0.1 whose replies a test scripts byte by byte: black holes,
/// dribbles, resets mid-body, compressed bodies. One request per connection; each
/// connection runs the script on its own thread. ``stop()`` closes everything.
final class ScriptedUpstream: Sendable {
    /// What a script can do with one connection.
    struct Connection: Sendable {
        let fd: Int32
        let upstream: ScriptedUpstream

        func send(_ text: String) { send(Array(text.utf8)) }

        func send(_ bytes: [UInt8]) {
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { Foundation.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return }
                offset += n
            }
        }

        /// Sleeps in small steps; false once the upstream is stopped.
        func pause(_ duration: Duration) -> Bool {
            let end = ContinuousClock.now + duration
            while ContinuousClock.now < end {
                if upstream.stopped { return false }
                usleep(10_000)
            }
            return !upstream.stopped
        }

        /// Closes with a TCP reset instead of a FIN.
        func reset() {
            var linger = Foundation.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Foundation.linger>.size))
        }
    }

    let port: Int
    private let listener: Int32
    private let state = Mutex<(stopped: Bool, listenerClosed: Bool, heads: [String], open: Set<Int32>)>((false, false, [], []))
    private let script: @Sendable (String, Connection) -> Void

    var stopped: Bool { state.withLock { $0.stopped } }
    /// Request heads received so far (lower-cased header names not guaranteed).
    var heads: [String] { state.withLock { $0.heads } }

    init(_ script: @escaping @Sendable (_ head: String, _ connection: Connection) -> Void) throws {
        self.script = script
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw DaemonError("cannot listen")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: actual.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// Owns the listening descriptor: closes it when stopped, so no other thread ever uses
    /// its number after the close (NIO may reuse it at once).
    private func acceptLoop() {
        defer {
            close(listener)
            state.withLock { $0.listenerClosed = true }
        }
        while !stopped {
            var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 50) > 0 else { continue }
            let fd = accept(listener, nil, nil)
            if fd < 0 { continue }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            state.withLock { _ = $0.open.insert(fd) }
            let thread = Thread { [self] in serve(fd) }
            thread.start()
        }
    }

    private func serve(_ fd: Int32) {
        defer {
            state.withLock { _ = $0.open.remove(fd) }
            close(fd)
        }
        var head = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        var tv = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        while head.count < 65536, !stopped {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { return }
            if n < 0 { if errno == EAGAIN || errno == EWOULDBLOCK { continue } else { return } }
            head += buffer[0..<n]
            if head.count >= 4, String(decoding: head, as: UTF8.self).contains("\r\n\r\n") { break }
        }
        let text = String(decoding: head, as: UTF8.self)
        state.withLock { $0.heads.append(text) }
        script(text, Connection(fd: fd, upstream: self))
    }

    /// Stops accepting and makes every script's `pause` return false; connections close as
    /// their scripts return.
    /// Idempotent; returns once the port is closed (bounded: 5 s).
    func stop() {
        state.withLock { $0.stopped = true }
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline, !state.withLock({ $0.listenerClosed && $0.open.isEmpty }) { usleep(10_000) }
    }


    /// The value of header `name` in a request head (case-insensitive), if present.
    static func header(_ name: String, in head: String) -> String? {
        for line in head.split(separator: "\r\n").dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            if line[..<colon].lowercased() == name.lowercased() {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    static func reply(_ status: String = "200 OK", headers: [String] = [], body: [UInt8]) -> [UInt8] {
        let head = (["HTTP/1.1 \(status)", "Content-Length: \(body.count)", "Connection: close"] + headers).joined(separator: "\r\n") + "\r\n\r\n"
        return Array(head.utf8) + body
    }
}

/// A loopback port that refuses connections for as long as it is held: a socket bound to it
/// that never listens. Connecting gets a reset at once, and no other socket (another test's
/// server) can take the port meanwhile, as it could a port merely bound and closed.
final class RefusingPort: Sendable {
    let port: Int
    private let fd: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else {
            Glibc.close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() {
        Glibc.close(fd)
    }
}
