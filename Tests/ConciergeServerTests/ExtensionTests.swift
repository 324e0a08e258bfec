import AsyncHTTPClient
import ConciergeCore
import ConciergeSampleAPI
@testable import ConciergeServer
import ConciergeTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization
import Testing

/// Pipeline extensions: write-invalidates, validation, unwrap, signing, warning codes, events, hooks.
@Suite("Pipeline extensions")
struct ExtensionTests {
    @Test("a write invalidates exactly the named endpoints' entries, not another user's")
    func writeInvalidates() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login("bob")
            _ = try await rig.get("/api/user/info")
            try await rig.login("alice")
            _ = try await rig.get("/api/user/info")
            _ = try await rig.get("/api/items")
            let update = try await rig.post("/api/user/update", form: "name=A")
            #expect(update.code == 200)
            let keys = try await rig.admin(.GET, "/cache/entries").json?[path: "entries"]?.serialized ?? ""
            #expect(!keys.contains("user=alice"))
            #expect(keys.contains("user=bob"))
            #expect(keys.contains("/api/items"))
            #expect(try await rig.get("/api/user/info").header("X-Cache") == "MISS")
            #expect(rig.logText.contains("write invalidated entries"))
        }
    }

    @Test("a reply that fails validation is never cached and gets the invalid reply naming path and problem")
    func validation() async throws {
        try await ConciergeTestRig.with(endpoints: """
            - name: items
              match: GET /api/items
              cache: { ttl: 60s }
              validate: { "data.list": object }
            - name: item
              match: GET /api/items/{id}
              cache: { ttl: 60s }
              validate: { "data.result": object, "data.result.id": number, "data.result.name": string, "data.missing": present }
            """) { rig in
            let bad = try await rig.get("/api/items")
            #expect(bad.status == 502)
            #expect(bad.json?[path: "code"] == .int(-2))
            #expect(bad.json?[path: "msg"] == "response failed validation: data.list is array, expected object")
            _ = try await rig.get("/api/items")
            #expect(rig.api.state.calls("/api/items") == 2)
            let missing = try await rig.get("/api/items/1")
            #expect(missing.json?[path: "msg"] == "response failed validation: data.missing is missing")
        }
    }

    @Test("unwrap gives the client the inner value while the cache keeps the whole reply")
    func unwrap() async throws {
        try await ConciergeTestRig.with(endpoints: """
            - name: item
              match: GET /api/items/{id}
              cache: { ttl: 60s }
              unwrap: data.result
            - name: nothing
              match: GET /api/items
              unwrap: data.nothing
            """) { rig in
            let first = try await rig.get("/api/items/5")
            #expect(first.json == ["id": 5, "name": "item 5"])
            #expect(first.header("X-Concierge-Unwrapped") == "data.result")
            let hit = try await rig.get("/api/items/5")
            #expect(hit.header("X-Cache") == "HIT")
            #expect(hit.json == ["id": 5, "name": "item 5"])
            let entry = try #require(await rig.daemon.cache.lookup(
                "GET http://127.0.0.1:\(rig.api.port)/api/items/5?app_version=1.4.0&platform=linux v=1"))
            #expect(JSONValue.parse(entry.body.readableBytesView)?[path: "code"] == .int(200))
            let missing = try await rig.get("/api/items")
            #expect(missing.status == 502)
            #expect(missing.json?[path: "code"] == .int(-2))
        }
    }

    @Test("signatures checked by the upstream for each algorithm and encoding; requests differing only in timestamp share an entry",
          arguments: ["hmac-sha256", "hmac-sha1", "md5-salted"], ["hex", "base64"])
    func signing(algorithm: String, encoding: String) async throws {
        let api = try await SampleAPI.start(configuration: SampleAPIConfiguration(signingSecret: "s3cr3t"))
        defer { Task { await api.shutdown() } }
        try await ConciergeTestRig.with(endpoints: """
            - name: signed
              match: GET,POST /api/signed
              cache: { ttl: 60s }
            - name: unsigned
              match: GET /api/items
              sign: false
            """, extra: "signing: { secret: s3cr3t, algorithm: \(algorithm), encoding: \(encoding) }\n", api: api) { rig in
            let first = try await rig.get("/api/signed?q=hello%20world&z=1")
            #expect(first.code == 200, "\(first.text)")
            #expect(first.json?[path: "data.algorithm"] == .string(algorithm))
            #expect(first.json?[path: "data.encoding"] == .string(encoding))
            let seen = try #require(api.state.lastRequest("/api/signed"))
            #expect(seen.queryValue("timestamp") != nil)
            #expect(seen.queryValue("nonce") != nil)
            let second = try await rig.get("/api/signed?z=1&q=hello%20world&timestamp=12345")
            #expect(second.header("X-Cache") == "HIT")
            let post = try await rig.post("/api/signed", form: "a=1&b=two")
            #expect(post.code == 200, "\(post.text)")
            _ = try await rig.get("/api/items")
            #expect(api.state.lastRequest("/api/items")?.queryValue("signature") == nil)
            #expect(!rig.logText.contains("s3cr3t"))
            #expect(rig.logText.contains("signed request"))
        }
        await api.shutdown()
    }

    @Test("warning codes fire their actions: event, log, logout")
    func warningCodes() async throws {
        try await ConciergeTestRig.with(endpoints: TestConfig.defaultEndpoints + "\n- name: warn\n  match: GET /api/warning", extra: """
            envelope:
              warning_codes: { 803: [event, log], 804: [logout, event] }
            """) { rig in
            let events = EventCollector(port: rig.proxyPort)
            try await events.waitConnected()
            try await rig.login("kim")
            let warned = try await rig.get("/api/warning?code=803")
            #expect(warned.code == 803)
            #expect(rig.logText.contains("warning code from upstream"))
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(true))
            _ = try await rig.get("/api/warning?code=804")
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(false))
            // Events reach the subscriber on their own stream, after the replies: wait (bounded)
            // for each one asserted, the warnings of both codes and the logout 804 caused.
            #expect(await eventually { events.payloads(of: "warning").compactMap { $0[path: "code"] } == [803, 804] })
            #expect(await eventually { events.payloads(of: "session.logout").map { $0[path: "user"] } == ["kim"] })
            #expect(events.payloads(of: "session.logout").first?[path: "reason"] == 804)
            events.stop()
        }
    }

    @Test("an events subscriber receives login, refresh, logout (802 and admin), warning, invalidation, upstream down/up in order")
    func eventsStream() async throws {
        try await ConciergeTestRig.with(endpoints: TestConfig.defaultEndpoints + "\n- name: warn\n  match: GET /api/warning", extra: """
            envelope:
              warning_codes: { 803: [event] }
            """) { rig in
            let events = EventCollector(port: rig.proxyPort)
            try await events.waitConnected()
            try await rig.login("lee")
            rig.api.state.expireAllAccessTokens()
            _ = try await rig.get("/api/user/info")
            _ = try await rig.get("/api/warning?code=803")
            _ = try await rig.admin(.POST, "/cache/invalidate", json: ["all": true])
            _ = try await rig.admin(.PUT, "/environment", json: ["environment": "down"])
            _ = try await rig.get("/api/echo")
            _ = try await rig.admin(.PUT, "/environment", json: ["environment": "debug"])
            _ = try await rig.get("/api/echo")
            rig.api.state.revokeAllSessions()
            _ = try await rig.get("/api/user/info?again=1")
            try await rig.login("lee")
            _ = try await rig.admin(.DELETE, "/session")
            let expected = ["session.login", "session.refreshed", "warning", "cache.invalidated", "environment.changed", "upstream.down",
                            "environment.changed", "session.logout", "session.login", "session.logout"]
            #expect(await eventually { events.types.count >= expected.count })
            #expect(events.types == expected)
            #expect(events.raw.contains("retry: 3000"))
            #expect(events.raw.contains("\"reason\":\"admin\""))
            #expect(events.raw.contains("\"reason\":802"))
            events.stop()
        }
    }

    @Test("upstream.down when the upstream stops answering, upstream.up when it is back")
    func upstreamDownAndUp() async throws {
        try await ConciergeTestRig.with { rig in
            let events = EventCollector(port: rig.proxyPort)
            try await events.waitConnected()
            let port = rig.api.port
            await rig.api.shutdown()
            #expect(try await rig.get("/api/items").status == 502)
            let revived = try await SampleAPI.start(port: port)
            #expect(try await rig.get("/api/items?again=1").status == 200)
            #expect(await eventually { events.types.count >= 2 })
            #expect(events.types == ["upstream.down", "upstream.up"])
            #expect(events.raw.contains("\"upstream\":\"debug\""))
            events.stop()
            await revived.shutdown()
        }
    }

    @Test("a subscriber that falls a whole buffer behind is dropped: its stream ends, the publisher never waits")
    func fallenBehindIsDropped() async throws {
        let bus = EventBus(bufferSize: 8)
        let stream = bus.subscribe()
        for i in 0..<9 { bus.publish("cache.invalidated", ["n": .int(Int64(i))]) }
        #expect(bus.subscriberCount == 0)
        var received = 0
        for await _ in stream { received += 1 }
        #expect(received == 8, "what was buffered, then the end")
    }

    @Test("a stalled subscriber does not slow other requests")
    func stalledSubscriber() async throws {
        try await ConciergeTestRig.with { rig in
            // A raw socket that subscribes and never reads.
            let stalled = try StalledSubscriber(port: rig.proxyPort)
            defer { stalled.close() }
            #expect(await eventually { rig.daemon.events.subscriberCount == 1 })
            let started = ContinuousClock.now
            for i in 0..<400 {
                _ = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": .string("nothing-\(i)")])
            }
            let elapsed = ContinuousClock.now - started
            print("400 invalidations beside a stalled subscriber: \(elapsed)")
            // Publishing never waits on the subscriber: were it to, the loop would never end.
            // The bound only keeps that hang from passing (a loaded 2-core machine takes ~20 s).
            #expect(elapsed < .seconds(120))
            let reply = try await rig.get("/api/items")
            #expect(reply.status == 200)
        }
    }

    @Test("a hook receives events; a dead hook URL blocks nothing")
    func hooks() async throws {
        let receiver = try await SampleAPI.start()
        defer { Task { await receiver.shutdown() } }
        // Connections to it are taken (the kernel's backlog) and never answered: each delivery
        // attempt waits out its 5 s timeout, three attempts 16.5 s at least.
        let silent = try SilentPort()
        defer { silent.close() }
        try await ConciergeTestRig.with(extra: """
            hooks:
              - url: http://127.0.0.1:\(receiver.port)/api/echo
                events: [session.login, cache.invalidated]
              - url: http://127.0.0.1:\(silent.port)/dead
            """) { rig in
            try await rig.login("max")
            // Each delivery is its own task: wait for the first before causing the second, so
            // the last one the receiver sees is known.
            #expect(await eventually { receiver.state.calls("/api/echo") == 1 })
            #expect(JSONValue.parse(receiver.state.lastRequest("/api/echo")?.body ?? "")?[path: "type"] == "session.login")
            _ = try await rig.admin(.POST, "/cache/invalidate", json: ["all": true])
            let reply = try await rig.get("/api/items")
            #expect(reply.status == 200)
            // A request that waited for the silent hook would come back only after its last
            // attempt failed; these came back while it still waits.
            #expect(!rig.logText.contains("attempt=3"), "the invalidation and the request waited for a dead hook")
            // Deliveries are at least once: a delivery that timed out on a loaded machine is
            // sent again, so the invalidation is looked for among all that arrived.
            let types: @Sendable () -> [String] = { receiver.state.recentRequests("/api/echo").compactMap { JSONValue.parse($0.body)?[path: "type"]?.stringValue } }
            #expect(await eventually { types().contains("cache.invalidated") },
                    "received \(types()); hook lines: \(rig.logs.lines.filter { $0.contains("hook") }.suffix(10))")
        }
        await receiver.shutdown()
    }
}

/// Subscribes to `/_concierge/events` and records the event types as they arrive.
final class EventCollector: Sendable {
    final class Storage: Sendable {
        let state = Mutex<(types: [String], raw: String)>(([], ""))
        let connected = Mutex(false)
    }

    private let storage: Storage
    private let task: Task<Void, Never>

    init(port: Int) {
        let storage = Storage()
        self.storage = storage
        task = Task {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/_concierge/events")
            request.method = .GET
            guard let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(60)) else { return }
            storage.connected.withLock { $0 = true }
            var pending = ""
            do {
                for try await chunk in response.body {
                    pending += String(buffer: chunk)
                    storage.state.withLock { $0.raw += String(buffer: chunk) }
                    while let range = pending.range(of: "\n\n") {
                        let block = pending[..<range.lowerBound]
                        pending = String(pending[range.upperBound...])
                        for line in block.split(separator: "\n") where line.hasPrefix("event: ") {
                            storage.state.withLock { $0.types.append(String(line.dropFirst(7))) }
                        }
                    }
                }
            } catch {}
        }
    }

    func waitConnected() async throws {
        guard await eventually(.seconds(5), { self.storage.connected.withLock { $0 } }) else { throw TimeoutError() }
        try await Task.sleep(for: .milliseconds(50))
    }

    var types: [String] { storage.state.withLock { $0.types } }
    var raw: String { storage.state.withLock { $0.raw } }

    /// The `data` of each event of `type` received so far, in order.
    func payloads(of type: String) -> [JSONValue] {
        raw.components(separatedBy: "\n\n").compactMap { block in
            let lines = block.split(separator: "\n")
            guard lines.contains(Substring("event: \(type)")), let data = lines.first(where: { $0.hasPrefix("data: ") }) else { return nil }
            return JSONValue.parse(String(data.dropFirst("data: ".count)))
        }
    }

    func stop() { task.cancel() }
}

/// A subscriber that connects, asks for the stream and never reads.
final class StalledSubscriber: Sendable {
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var size: Int32 = 4096
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let ok = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard ok == 0 else { throw TimeoutError() }
        let request = Array("GET /_concierge/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    func close() { _ = Foundation.close(fd) }
}

/// A loopback TCP port that takes connections (they wait in the kernel's backlog) and never
/// answers them: a hook or upstream that hangs.
final class SilentPort: Sendable {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            _ = Glibc.close(fd)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(fd) }
}

