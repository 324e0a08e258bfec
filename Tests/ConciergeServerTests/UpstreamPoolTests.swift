import ConciergeCore
import ConciergeTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing

@testable import ConciergeServer

/// Concierge's own upstream connection pool over real sockets on 127.0.0.1: keep-alive
/// reuse, connections the upstream closes, cut replies, deadlines, TLS with a test CA,
/// `Connection: close`, and the bound on connections under load. The pools under test run
/// on a one-loop group, so "per event loop" bounds are exact.
@Suite("Upstream connection pool")
struct UpstreamPoolTests {
    static let okBody = #"{"code":200,"msg":"ok"}"#

    // MARK: Fixtures

    /// A pool on a group of one event loop, shut down (with the group) after `body`.
    func withPool(maxConnections: Int = 16, idleTimeout: TimeAmount = .seconds(60), connectTimeout: TimeAmount = .seconds(5),
                  _ body: (UpstreamConnectionPool) async throws -> Void) async throws {
        try await withPool(loops: 1, maxConnections: maxConnections, idleTimeout: idleTimeout, connectTimeout: connectTimeout) { pool, _ in
            try await body(pool)
        }
    }

    /// A pool on a group of `loops` event loops, shut down (with the group) after `body`, which
    /// is given the group's loops too.
    func withPool(loops count: Int, maxConnections: Int = 16, idleTimeout: TimeAmount = .seconds(60), connectTimeout: TimeAmount = .seconds(5),
                  _ body: (UpstreamConnectionPool, [any EventLoop]) async throws -> Void) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: count)
        var configuration = UpstreamConnectionPool.Configuration()
        configuration.maxConnectionsPerOrigin = maxConnections
        configuration.idleTimeout = idleTimeout
        configuration.connectTimeout = connectTimeout
        let pool = UpstreamConnectionPool(group: group, configuration: configuration)
        do {
            try await body(pool, Array(group.makeIterator()))
        } catch {
            await pool.shutdown()
            try? await group.shutdownGracefully()
            throw error
        }
        await pool.shutdown()
        try await group.shutdownGracefully()
    }

    /// An upstream answering as `reply` says, stopped after `body`.
    func withUpstream(tls: TestCertificateAuthority? = nil, reply: @escaping @Sendable (KeepAliveUpstream.Request) -> KeepAliveUpstream.Reply,
                      _ body: (KeepAliveUpstream) async throws -> Void) async throws {
        let upstream = try await KeepAliveUpstream.start(tls: tls?.serverContext, reply: reply)
        do {
            try await body(upstream)
        } catch {
            await upstream.stop()
            throw error
        }
        await upstream.stop()
    }

    /// The default timeout only keeps a hang from lasting: a test that proves a timeout gives
    /// its own (5 s was once met by a plain request while the suite's first seconds starved it).
    func request(_ url: String, method: String = "GET", body: String? = nil, timeout: Duration = .seconds(60)) -> UpstreamRequest {
        UpstreamRequest(method: method, url: url, headers: ["Accept": "application/json"],
                        body: body.map { .bytes(ByteBuffer(string: $0)) } ?? .none, timeout: timeout)
    }

    func send(_ pool: UpstreamConnectionPool, _ request: UpstreamRequest, maxBody: Int = 1 << 20,
              caFile: String? = nil) async -> Result<UpstreamResponse, UpstreamFailure> {
        do {
            return .success(try await pool.send(request, maxBody: maxBody, caFile: caFile))
        } catch {
            return .failure(error)
        }
    }

    static func isUnreachable(_ result: Result<UpstreamResponse, UpstreamFailure>) -> Bool {
        if case .failure(.unreachable) = result { return true }
        return false
    }

    static func isTimeout(_ result: Result<UpstreamResponse, UpstreamFailure>) -> Bool {
        if case .failure(.timeout) = result { return true }
        return false
    }

    static func body(_ result: Result<UpstreamResponse, UpstreamFailure>) -> String? {
        guard case .success(let response) = result, response.status == 200 else { return nil }
        return String(buffer: response.body)
    }

    // MARK: Reuse and closing

    @Test("100 sequential requests use exactly one upstream connection")
    func keepAliveReuse() async throws {
        try await withUpstream(reply: { _ in .send(body: Self.okBody) }) { upstream in
            try await withPool { pool in
                for i in 0..<100 {
                    let result = await send(pool, request(upstream.url + "/api/items?page=\(i)"))
                    #expect(Self.body(result) == Self.okBody, "request \(i): \(result)")
                }
                #expect(upstream.counts.accepted == 1)
                #expect(upstream.requests.map(\.sequence) == Array(0..<100))
                #expect(await pool.connectionCount() == 1)
            }
        }
    }

    @Test("the request as sent: Host, Content-Length for a body, method and target byte for byte")
    func requestFraming() async throws {
        try await withUpstream(reply: { _ in .send(body: Self.okBody) }) { upstream in
            try await withPool { pool in
                _ = await send(pool, request(upstream.url + "/api/echo?a=1&b=%20", method: "POST", body: "x=1&y=2"))
                _ = await send(pool, request(upstream.url + "/api/echo", method: "M-SEARCH"))
                let seen = upstream.requests
                try #require(seen.count == 2)
                #expect(seen[0].head.method == .POST)
                #expect(seen[0].head.uri == "/api/echo?a=1&b=%20")
                #expect(seen[0].head.headers["Host"] == ["127.0.0.1:\(upstream.port)"])
                #expect(seen[0].head.headers["Content-Length"] == ["7"])
                #expect(seen[0].body == "x=1&y=2")
                // NIO's parser reads the wire's `M-SEARCH` as `.MSEARCH` (it knows no `MSEARCH`).
                #expect(seen[1].head.method == .MSEARCH)
                #expect(upstream.counts.accepted == 1)
            }
        }
    }

    @Test("a reply to HEAD ends at its head though it announces a length: the response decoder knows the method")
    func headReplyHasNoBody() async throws {
        try await withUpstream(reply: { _ in .truncated(announced: 10, sent: "") }) { upstream in
            try await withPool { pool in
                let result = await send(pool, request(upstream.url + "/api/items", method: "HEAD"))
                guard case .success(let response) = result else {
                    Issue.record("HEAD: \(result)")
                    return
                }
                #expect(response.status == 200 && response.body.readableBytes == 0)
                #expect(upstream.requests.map(\.head.method) == [.HEAD])
            }
        }
    }

    @Test("an idle pooled connection the upstream closes is dropped; the next request opens a new one")
    func upstreamClosesIdleConnection() async throws {
        try await withUpstream(reply: { r in .send(body: Self.okBody, close: r.connection == 0) }) { upstream in
            try await withPool { pool in
                #expect(Self.body(await send(pool, request(upstream.url + "/a"))) == Self.okBody)
                #expect(await eventually(.seconds(60)) { await pool.connectionCount() == 0 }, "the pool noticed the close")
                #expect(Self.body(await send(pool, request(upstream.url + "/b"))) == Self.okBody)
                #expect(upstream.counts.accepted == 2)
            }
        }
    }

    @Test("a GET on a reused connection the upstream closes before replying is sent once more on a new connection")
    func retryIdempotentOnStaleConnection() async throws {
        // The second request on the first connection meets a close: as if the upstream's own
        // idle timeout fired just as Concierge reused the connection.
        try await withUpstream(reply: { r in r.connection == 0 && r.sequence == 1 ? .closeWithoutReply : .send(body: Self.okBody) }) { upstream in
            try await withPool { pool in
                #expect(Self.body(await send(pool, request(upstream.url + "/first"))) == Self.okBody)
                #expect(Self.body(await send(pool, request(upstream.url + "/second"))) == Self.okBody)
                #expect(upstream.counts.accepted == 2)
                #expect(upstream.requests.map(\.head.uri) == ["/first", "/second", "/second"])
            }
        }
    }

    @Test("a POST on a reused connection the upstream closes before replying is not sent again: unreachable")
    func noRetryForPost() async throws {
        try await withUpstream(reply: { r in r.sequence == 1 ? .closeWithoutReply : .send(body: Self.okBody) }) { upstream in
            try await withPool { pool in
                #expect(Self.body(await send(pool, request(upstream.url + "/order", method: "POST", body: "n=1"))) == Self.okBody)
                let second = await send(pool, request(upstream.url + "/order", method: "POST", body: "n=2"))
                #expect(Self.isUnreachable(second), "\(second)")
                #expect(upstream.requests.map(\.body) == ["n=1", "n=2"])
                #expect(upstream.counts.accepted == 1)
            }
        }
    }

    @Test("replies with Connection: close close their connection: each request a new one, all succeed, none left open")
    func connectionCloseHonoured() async throws {
        // The upstream says close but leaves the socket open: Concierge must close it.
        try await withUpstream(reply: { _ in .send(headers: [("Connection", "close")], body: Self.okBody) }) { upstream in
            try await withPool { pool in
                for i in 0..<20 {
                    #expect(Self.body(await send(pool, request(upstream.url + "/c/\(i)"))) == Self.okBody)
                }
                #expect(upstream.counts.accepted == 20)
                #expect(upstream.requests.allSatisfy { $0.sequence == 0 })
                #expect(await eventually(.seconds(60)) { upstream.counts.open == 0 }, "open: \(upstream.counts.open)")
            }
        }
    }

    @Test("an idle connection is closed after the idle timeout")
    func idleTimeout() async throws {
        try await withUpstream(reply: { _ in .send(body: Self.okBody) }) { upstream in
            try await withPool(idleTimeout: .milliseconds(200)) { pool in
                #expect(Self.body(await send(pool, request(upstream.url + "/a"))) == Self.okBody)
                #expect(await eventually(.seconds(60)) { upstream.counts.open == 0 && upstream.counts.accepted == 1 })
                #expect(await pool.connectionCount() == 0)
                #expect(Self.body(await send(pool, request(upstream.url + "/b"))) == Self.okBody)
                #expect(upstream.counts.accepted == 2)
            }
        }
    }

    // MARK: Which event loop

    /// Runs its work on one event loop's thread (an actor whose executor is the loop).
    actor LoopPinned {
        let eventLoop: any EventLoop
        nonisolated var unownedExecutor: UnownedSerialExecutor { eventLoop.executor.asUnownedSerialExecutor() }

        init(_ eventLoop: any EventLoop) {
            self.eventLoop = eventLoop
        }

        func send(_ pool: UpstreamConnectionPool, _ request: UpstreamRequest) async -> String? {
            precondition(eventLoop.inEventLoop)
            return try? String(buffer: await pool.send(request, maxBody: 1 << 20).body)
        }
    }

    @Test("a caller on one of the group's loops uses that loop's pool; preferredEventLoop names one; else the loops take turns")
    func loopChoice() async throws {
        try await withPool(loops: 2) { pool, loops in try await self.loopChoice(pool, loops) }
    }

    func loopChoice(_ pool: UpstreamConnectionPool, _ loops: [any EventLoop]) async throws {
        try await withUpstream(reply: { _ in .send(body: Self.okBody) }) { upstream in
            let pinned = LoopPinned(loops[1])
            for i in 0..<10 {
                #expect(await pinned.send(pool, request(upstream.url + "/pinned/\(i)")) == Self.okBody)
            }
            #expect(upstream.counts.accepted == 1)
            for i in 0..<10 {
                let result = await UpstreamConnectionPool.$preferredEventLoop.withValue(loops[1]) {
                    await send(pool, request(upstream.url + "/preferred/\(i)"))
                }
                #expect(Self.body(result) == Self.okBody)
            }
            #expect(upstream.counts.accepted == 1, "the same loop, the same kept-alive connection")
            for i in 0..<4 { _ = await send(pool, request(upstream.url + "/turns/\(i)")) }
            #expect(upstream.counts.accepted == 2, "the other loop opened its own")
        }
    }

    // MARK: Failures

    @Test("a head and part of a Content-Length body, then close: unreachable, and the connection is gone")
    func halfAnswer() async throws {
        try await withUpstream(reply: { _ in .truncated(announced: 100, sent: #"{"code":200,"#) }) { upstream in
            try await withPool { pool in
                let result = await send(pool, request(upstream.url + "/cut"))
                #expect(Self.isUnreachable(result), "\(result)")
                #expect(await eventually(.seconds(60)) { await pool.connectionCount() == 0 })
            }
        }
    }

    @Test("a refused connection fails at once: unreachable")
    func connectRefused() async throws {
        let refusing = try RefusingPort()
        defer { refusing.close() }
        let port = refusing.port
        try await withPool { pool in
            // Unreachable, not timeout, is the proof that the refusal ended it and not the 30 s
            // timeout; no clock bound (the suite's first seconds can starve a test for 5 s).
            let result = await send(pool, request("http://127.0.0.1:\(port)/x", timeout: .seconds(30)))
            #expect(Self.isUnreachable(result), "\(result)")
            #expect(await pool.connectionCount() == 0)
        }
    }

    @Test("a slow upstream is cut at the request's timeout: timeout, and that connection is closed")
    func slowUpstreamTimesOut() async throws {
        try await withUpstream(reply: { r in r.head.uri == "/slow" ? .silence : .send(body: Self.okBody) }) { upstream in
            try await withPool { pool in
                let started = ContinuousClock.now
                let result = await send(pool, request(upstream.url + "/slow", timeout: .milliseconds(500)))
                let elapsed = ContinuousClock.now - started
                #expect(Self.isTimeout(result), "\(result)")
                #expect(elapsed >= .milliseconds(450) && elapsed < .seconds(25), "took \(elapsed)")
                #expect(await eventually(.seconds(60)) { upstream.counts.open == 0 })
                #expect(Self.body(await send(pool, request(upstream.url + "/fast"))) == Self.okBody)
            }
        }
    }

    @Test("the timeout covers waiting for a connection: with the only connection busy, a waiting request times out; a cancelled one gives up")
    func timeoutWhileWaiting() async throws {
        try await withUpstream(reply: { r in r.head.uri == "/hold" ? .silence : .send(body: Self.okBody) }) { upstream in
            try await withPool(maxConnections: 1) { pool in
                let holder = Task { await send(pool, request(upstream.url + "/hold", timeout: .seconds(30))) }
                #expect(await eventually(.seconds(60)) { upstream.requests.count == 1 })
                let started = ContinuousClock.now
                let waiting = await send(pool, request(upstream.url + "/next", timeout: .milliseconds(300)))
                let elapsed = ContinuousClock.now - started
                #expect(Self.isTimeout(waiting), "\(waiting)")
                // Timeout (not unreachable) is the proof; the bound keeps it from being the
                // holder's 30 s, with room for a starved test process.
                #expect(elapsed < .seconds(20), "took \(elapsed)")
                holder.cancel()
                #expect(Self.isUnreachable(await holder.value))
                #expect(upstream.requests.map(\.head.uri) == ["/hold"])
                #expect(await eventually(.seconds(60)) { upstream.counts.open == 0 }, "the cancelled request's connection is closed")
            }
        }
    }

    @Test("a reply over maxBody is tooLarge and its connection is not reused")
    func tooLarge() async throws {
        let big = String(repeating: "x", count: 10_000)
        try await withUpstream(reply: { r in r.head.uri == "/big" ? .send(body: big) : .send(body: Self.okBody) }) { upstream in
            try await withPool { pool in
                let result = await send(pool, request(upstream.url + "/big"), maxBody: 1000)
                guard case .failure(.tooLarge) = result else {
                    Issue.record("expected tooLarge, got \(result)")
                    return
                }
                #expect(Self.body(await send(pool, request(upstream.url + "/small"), maxBody: 1000)) == Self.okBody)
                #expect(upstream.counts.accepted == 2)
            }
        }
    }

    // MARK: Load

    @Test("1,000 concurrent requests with at most 10 connections (one event loop): all succeed, the upstream sees at most 10")
    func boundedUnderLoad() async throws {
        try await withUpstream(reply: { r in .send(body: #"{"code":200,"n":"\#(r.head.uri)"}"#) }) { upstream in
            try await withPool(maxConnections: 10) { pool in
                let answered = await withTaskGroup(of: Bool.self) { group in
                    for i in 0..<1000 {
                        group.addTask {
                            let result = await send(pool, request(upstream.url + "/n/\(i)", timeout: .seconds(30)))
                            return Self.body(result) == #"{"code":200,"n":"/n/\#(i)"}"#
                        }
                    }
                    return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
                #expect(answered == 1000)
                #expect(upstream.counts.mostOpen <= 10, "most open at once: \(upstream.counts.mostOpen)")
                #expect(upstream.counts.accepted <= 10, "accepted: \(upstream.counts.accepted)")
                #expect(upstream.requests.count == 1000)
            }
        }
    }

    // MARK: TLS

    @Test("an https upstream signed by a test CA: trusted through ca_file by name and by address, refused with the system store")
    func httpsWithTestCA() async throws {
        let authority = try TestCertificateAuthority()
        let directory = FileManager.default.temporaryDirectory.path
        let caFile = try authority.writeCA(in: directory)
        defer { try? FileManager.default.removeItem(atPath: caFile) }
        try await withUpstream(tls: authority, reply: { _ in .send(body: Self.okBody) }) { upstream in
            try await withPool { pool in
                for host in ["localhost", "127.0.0.1"] {
                    let url = "https://\(host):\(upstream.port)/secure"
                    for _ in 0..<3 {
                        #expect(Self.body(await send(pool, request(url), caFile: caFile)) == Self.okBody, "\(host)")
                    }
                    let untrusted = await send(pool, request(url))
                    #expect(Self.isUnreachable(untrusted), "\(host) with the system store: \(untrusted)")
                }
                // One kept-alive connection per (host, trust store) that succeeded.
                #expect(upstream.requests.count == 6)
                #expect(Set(upstream.requests.map(\.connection)).count == 2)
            }
        }
    }

    // MARK: Through the daemon

    /// A daemon whose config adds `upstreamLines` under `upstreams:` and `endpoints`.
    func withRig(upstreamLines: String, endpoints: String, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(endpoints: TestConfig.defaultEndpoints + "\n" + endpoints, configTransform: { yaml in
            yaml.replacingOccurrences(of: "  down: http://127.0.0.1:1\n", with: "  down: http://127.0.0.1:1\n" + upstreamLines)
        }, body)
    }

    @Test("daemon: sequential misses on one client connection run on its event loop and reuse one upstream connection")
    func daemonKeepAlive() async throws {
        try await withUpstream(reply: { _ in .send(headers: [("Content-Type", "application/json")], body: Self.okBody) }) { upstream in
            let endpoints = "- { name: pooled, match: \"GET /api/pooled\", upstream: pooled }"
            try await withRig(upstreamLines: "  pooled: \(upstream.url)\n", endpoints: endpoints) { rig in
                // One client connection (a raw socket: an HTTP client could open a second).
                let client = try RawSocket(port: rig.proxyPort)
                for i in 0..<40 {
                    client.send("GET /api/pooled?i=\(i) HTTP/1.1\r\nHost: 127.0.0.1:\(rig.proxyPort)\r\n\r\n")
                    let reply = await client.receive { $0.hasSuffix(Self.okBody) }
                    #expect(reply.hasPrefix("HTTP/1.1 200"), "\(reply)")
                }
                #expect(upstream.requests.count == 40)
                #expect(upstream.counts.accepted == 1, "accepted \(upstream.counts.accepted): the loops took turns")
            }
        }
    }

    @Test("daemon: an upstream that half-answers then closes is 502 with the unavailable body, and nothing is cached")
    func daemonHalfAnswer() async throws {
        try await withUpstream(reply: { _ in .truncated(announced: 200, sent: #"{"code":200,"msg":"#) }) { upstream in
            let endpoints = "- { name: cut, match: \"GET /api/cut\", upstream: pooled, cache: { ttl: 60s } }"
            try await withRig(upstreamLines: "  pooled: \(upstream.url)\n", endpoints: endpoints) { rig in
                for _ in 0..<2 {
                    let reply = try await rig.get("/api/cut")
                    #expect(reply.status == 502)
                    #expect(reply.json == ["code": -1, "msg": "service temporarily unavailable"])
                    #expect(reply.header("X-Cache") != "HIT")
                }
                #expect(upstream.requests.count == 2, "the second request went upstream again: nothing was cached")
                let entries = try await rig.admin(.GET, "/cache/entries")
                #expect(entries.json?[path: "entries"] == .array([]))
            }
        }
    }

    @Test("daemon: a slow upstream is 504 at the endpoint's timeout")
    func daemonTimeout() async throws {
        try await withUpstream(reply: { _ in .silence }) { upstream in
            let endpoints = "- { name: slowPooled, match: \"GET /api/slow-pooled\", upstream: pooled, timeout: 1s }"
            try await withRig(upstreamLines: "  pooled: \(upstream.url)\n", endpoints: endpoints) { rig in
                let started = ContinuousClock.now
                let reply = try await rig.get("/api/slow-pooled")
                let elapsed = ContinuousClock.now - started
                #expect(reply.status == 504)
                #expect(elapsed >= .milliseconds(900) && elapsed < .seconds(25), "took \(elapsed)")
            }
        }
    }

    @Test("daemon: an https upstream trusted through upstreams.<name>.ca_file (long form) answers through the proxy")
    func daemonHTTPSWithCAFile() async throws {
        let authority = try TestCertificateAuthority()
        let caFile = try authority.writeCA(in: FileManager.default.temporaryDirectory.path)
        defer { try? FileManager.default.removeItem(atPath: caFile) }
        let reply: @Sendable (KeepAliveUpstream.Request) -> KeepAliveUpstream.Reply = { _ in
            .send(headers: [("Content-Type", "application/json")], body: Self.okBody)
        }
        try await withUpstream(tls: authority, reply: reply) { upstream in
            let lines = "  secure:\n    url: https://localhost:\(upstream.port)\n    ca_file: \(caFile)\n"
            let endpoints = "- { name: secure, match: \"GET /api/secure\", upstream: secure, cache: { ttl: 60s } }"
            try await withRig(upstreamLines: lines, endpoints: endpoints) { rig in
                let first = try await rig.get("/api/secure")
                #expect(first.status == 200)
                #expect(first.code == 200)
                #expect(first.header("X-Cache") == "MISS")
                #expect(upstream.requests.first?.head.headers["Host"] == ["localhost:\(upstream.port)"])
            }
        }
    }
}
