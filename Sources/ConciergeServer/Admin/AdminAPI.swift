import ConciergeCore
import ConciergeStorage
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Every admin route (docs/admin-api.md, docs/openapi.yaml) in one router. All but `/health`,
/// `/openapi.yaml` and the status page `/ui` need `Authorization: Bearer <token>`, compared in
/// constant time.
struct AdminAPI: Sendable {
    let control: AdminControl
    let token: String

    /// The route table: middleware first (error shape, `Host`, token, methods), then each route.
    func makeRouter() -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: AdminErrorMiddleware(logger: control.logger))
        router.add(middleware: AdminHostMiddleware(runtime: control.runtime))
        router.add(middleware: AdminAuthMiddleware(token: token))
        router.add(middleware: AdminMethodMiddleware())
        router.get("/health") { _, _ in health() }
        router.get("/openapi.yaml") { _, _ in AdminOpenAPI.response() }
        router.get("/metrics") { _, _ in metrics() }
        router.get("/stats") { _, _ in await stats() }
        router.post("/cache/invalidate") { request, _ in try await invalidate(request) }
        router.get("/cache/entries") { request, _ in try await entries(request) }
        router.get("/session") { _, _ in json(control.sessionDescription()) }
        router.put("/session") { request, _ in try await setSession(request) }
        router.delete("/session") { _, _ in await logOut() }
        addSessionRoutes(router)
        router.get("/environment") { _, _ in environment() }
        router.put("/environment") { request, _ in try await switchEnvironment(request) }
        router.post("/reload") { _, _ in await reload() }
        router.get("/fleet") { _, _ in await fleet() }
        router.get("/ui") { _, _ in StatusPage.page() }
        router.get("/ui/stream") { _, _ in StatusPage(api: self).stream() }
        return router
    }

    func health() -> Response {
        // Still 200: the proxy serves, from memory where SQLite cannot take writes, and alone
        // while the fleet's PostgreSQL does not answer.
        var reply: [String: JSONValue] = ["status": "ok"]
        if control.storageDegraded() { reply["storage"] = "degraded" }
        if let fleet = control.lifecycle.fleet { reply["fleet"] = .string(fleet.isReachable ? "ok" : "degraded") }
        return json(.object(reply))
    }

    func metrics() -> Response {
        control.refreshGauges()
        let text = control.stats.prometheusText()
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(bytes: text)))
    }

    /// Right after a start the writer may still be reading the cache's rows (about a second a
    /// million): the counts wait for it, 2 s at most.
    func stats() async -> Response {
        if control.cache.isIndexLoading {
            let cache = control.cache
            _ = try? await Deadline.run(.seconds(2)) { await cache.indexLoaded() }
        }
        let snapshot = control.stats.snapshot(entries: control.cache.entryCount, bytes: control.cache.byteCount)
        return json(.object(snapshot.mapValues { .int(Int64($0)) }))
    }

    func invalidate(_ request: Request) async throws -> Response {
        let waitForFleet: Bool
        switch request.uri.queryParameters.get("wait") {
        case nil: waitForFleet = false
        case "fleet"?: waitForFleet = true
        case let other?: return error(.badRequest, "wait must be 'fleet', not '\(other)'")
        }
        let body = try await readJSON(request)
        let usage = "give exactly one of {\"pattern\": REGEX}, {\"endpoint\": NAME}, {\"tags\": [TAG, ...]}, {\"session\": NAME} or {\"all\": true}, and optionally \"soft\": true"
        guard case .object(var fields) = body else { return error(.badRequest, usage) }
        var soft = false
        if let flag = fields.removeValue(forKey: "soft") {
            guard case .bool(let b) = flag else { return error(.badRequest, "soft must be true or false") }
            soft = b
        }
        guard fields.count == 1 else { return error(.badRequest, usage) }
        var criteria: InvalidationCriteria
        let by: String
        var pattern: KeyPattern?
        if case .array(let items)? = fields["tags"] {
            let tags = items.compactMap(\.stringValue)
            guard !tags.isEmpty, tags.count == items.count, tags.allSatisfy({ !$0.isEmpty }) else {
                return error(.badRequest, "tags must be a non-empty list of non-empty strings")
            }
            criteria = .tags(tags)
            by = "tags"
        } else if case .string(let source)? = fields["pattern"] {
            do { pattern = try KeyPattern(source) } catch { return Self.refusal(error) }
            criteria = .pattern(source)
            by = "pattern"
        } else if case .string(let endpoint)? = fields["endpoint"] {
            guard control.runtime.current.settings.endpoint(named: endpoint) != nil else {
                return error(.notFound, "no endpoint named '\(endpoint)'")
            }
            criteria = .endpoints([endpoint], scope: .everyone)
            by = "endpoint"
        } else if case .string(let name)? = fields["session"] {
            guard let selector = sessionSelector(name) else { return error(.notFound, "no session named '\(name)'") }
            (pattern, criteria, by) = (selector.pattern, .pattern(selector.source), "session")
        } else if case .bool(true)? = fields["all"] {
            (criteria, by) = (.all, "all")
        } else {
            return error(.badRequest, usage)
        }
        if soft { criteria = .soft(criteria) }
        var removed = 0, marked = 0
        do {
            if soft {
                marked = try await control.cache.markStale(criteria)
            } else if let pattern {
                removed = try await control.cache.invalidate(matching: pattern)
            } else {
                removed = try await control.cache.invalidate(criteria)
            }
        } catch let refused as KeyPatternError {
            return Self.refusal(refused)
        }
        var counts: [String: JSONValue] = ["removed": .int(Int64(removed))]
        if soft { counts["marked"] = .int(Int64(marked)) }
        control.stats.increment(.invalidations)
        control.events.publish("cache.invalidated", .object(counts.merging(["by": .string(by)]) { $1 }))
        control.logger.info("cache invalidated", metadata: ["by": "\(by)", "removed": "\(removed)", "soft": "\(soft)", "marked": "\(marked)"])
        // In a fleet: logged for every node (`{"seq": N}`; with `?wait=fleet`, once every node
        // seen in the last minute applied it, or after 5 s with those that have not), or kept
        // until PostgreSQL answers (202).
        guard let fleet = control.lifecycle.fleetInvalidations else { return json(.object(counts)) }
        switch await fleet.publish(criteria) {
        case .logged(let seq):
            var reply: [String: JSONValue] = ["seq": .int(seq)]
            if waitForFleet {
                let lagging = await fleet.waitUntilApplied(seq)
                reply["lagging"] = lagging.map { .array($0.map { .string($0) }) } ?? .null
            }
            counts["fleet"] = .object(reply)
            return json(.object(counts))
        case .pending:
            counts["fleet"] = "pending"
            return json(.object(counts), status: .accepted)
        }
    }

    func entries(_ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        var pattern: KeyPattern? = nil
        if let p = query.get("pattern"), !p.isEmpty {
            do { pattern = try KeyPattern(p) } catch { return Self.refusal(error) }
        }
        var limit = 100
        if let l = query.get("limit") {
            guard let v = Int(l), (1...10_000).contains(v) else { return error(.badRequest, "limit must be 1...10000") }
            limit = v
        }
        // The cursor is a key (it holds spaces): read as a form decodes it, `+` a space, which
        // the router's own query decoding leaves as `+`.
        let cursor = QueryString.parse(request.uri.query ?? "").last { $0.name == "cursor" }.flatMap { $0.value.isEmpty ? nil : $0.value }
        let page: (entries: [CacheStore.EntrySummary], next: String?)
        do {
            page = try await control.cache.entries(pattern: pattern, limit: limit, cursor: cursor)
        } catch let refused as KeyPatternError {
            return Self.refusal(refused)
        }
        let entries: [JSONValue] = page.entries.map { e in
            ["key": .string(e.key), "endpoint": .string(e.endpoint), "user": e.userID.map(JSONValue.string) ?? .null,
             "size": .int(Int64(e.size)), "age": .int(Int64(e.age)), "ttl": .int(Int64(e.ttl)),
             "tags": .array(e.tags.map(JSONValue.string))]
        }
        return json(["entries": .array(entries), "next": page.next.map(JSONValue.string) ?? .null])
    }

    func setSession(_ request: Request) async throws -> Response {
        let body = try await readJSON(request)
        guard case .object(let f) = body, case .string(let access)? = f["access_token"], !access.isEmpty,
              [nil, .null].contains(f["refresh_token"]) || f["refresh_token"]?.stringValue != nil,
              [nil, .null].contains(f["user_id"]) || f["user_id"]?.stringValue != nil || f["user_id"]?.typeName == "number" else {
            return error(.badRequest, "body must be {\"access_token\": STRING, \"refresh_token\": STRING, \"user_id\": STRING or NUMBER}")
        }
        // With `session.app_token` the tokens set by hand are the app token (no user).
        let kind = control.runtime.current.settings.session.kind
        let user = kind == .app ? nil : f["user_id"].flatMap { $0 == .null ? nil : $0.parameterText }
        let tokens = SessionTokens(accessToken: access, refreshToken: f["refresh_token"]?.stringValue, userID: user, kind: kind)
        try await control.lifecycle.login(byHand: tokens)
        return json(control.sessionDescription())
    }

    func logOut() async -> Response {
        let dropped = await control.lifecycle.logout(ifAccessToken: nil, reason: "admin")
        return json(["logged_out": .bool(dropped != nil)])
    }

    func environment() -> Response {
        json(environmentDescription())
    }

    /// `GET /environment`: the current environment and every upstream's base URL.
    func environmentDescription() -> JSONValue {
        ["environment": .string(control.runtime.environment),
         "upstreams": .object(Dictionary(uniqueKeysWithValues: control.runtime.current.settings.upstreams.map { ($0.name, JSONValue.string($0.baseURL)) }))]
    }

    func switchEnvironment(_ request: Request) async throws -> Response {
        let body = try await readJSON(request)
        guard case .object(let f) = body, case .string(let name)? = f["environment"] else {
            return error(.badRequest, "body must be {\"environment\": NAME}")
        }
        guard control.runtime.setEnvironment(name) else {
            let known = control.runtime.current.settings.upstreams.map(\.name).joined(separator: ", ")
            return error(.notFound, "no upstream named '\(name)' (known: \(known))")
        }
        control.events.publish("environment.changed", ["environment": .string(name)])
        control.logger.info("environment switched", metadata: ["environment": "\(name)"])
        return json(["environment": .string(name)])
    }

    /// `GET /fleet`: this node's place in its fleet; `{"state": "off"}` for a daemon on its own.
    func fleet() async -> Response {
        json(await fleetDescription())
    }

    func fleetDescription() async -> JSONValue {
        guard let fleet = control.lifecycle.fleet else { return ["state": "off"] }
        // At once, so a database that does not answer costs one deadline, not three.
        let limit = fleet.config.timeout * 5
        async let counted = try? Deadline.run(limit) { try await fleet.database.tokenRequestCount() }
        async let newest = try? Deadline.run(limit) { try await fleet.database.logBounds()?.newest ?? 0 }
        async let listed = try? Deadline.run(limit) { try await fleet.database.nodes() }
        let (requests, seq, nodes) = await (counted, newest, listed)
        let delays: JSONValue = control.lifecycle.fleetInvalidations?.applyDelays.map { d in
            ["count": .int(Int64(d.count)), "p50": .double(d.p50), "p99": .double(d.p99), "max": .double(d.max)]
        } ?? .null
        return ["apply_delay_ms": delays, "name": .string(fleet.config.name), "node": .string(fleet.config.node),
                "state": .string(fleet.isReachable ? "ok" : "degraded"), "session_version": .int(fleet.appliedVersion),
                "applied_seq": .int(control.lifecycle.fleetInvalidations?.appliedSeq ?? 0),
                "token_requests": requests.map { .int(Int64($0)) } ?? .null, "seq": seq.map { .int($0) } ?? .null,
                "nodes": nodes.map { .array($0.map(Self.describe)) } ?? .null]
    }

    /// A node of the fleet in `GET /fleet`: `ok` when it reported in the last 5 s (each node
    /// reports every second), else `silent`.
    static func describe(_ node: FleetDatabase.NodeRow) -> JSONValue {
        let seen = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: node.lastSeen))
        return ["node": .string(node.node), "last_seen": .string(seen), "applied_seq": .int(node.appliedSeq),
                "state": .string(node.silentFor < 5 ? "ok" : "silent")]
    }

    func reload() async -> Response {
        switch await control.reload() {
        case .success(let message): return json(["reloaded": true, "message": .string(message)])
        case .failure(let failure): return json(["reloaded": false, "error": .string(failure.description)], status: .unprocessableContent)
        }
    }

    /// A pattern refused: `400` with PCRE2's message when it does not compile, `422` naming
    /// the limit a match or the scan exceeded.
    static func refusal(_ error: KeyPatternError) -> Response {
        switch error {
        case .invalid(let message): return json(["error": .string("invalid regex: \(message)")], status: .badRequest)
        case .limitExceeded, .deadlineExceeded: return json(["error": .string(error.description)], status: .unprocessableContent)
        case .cancelled: return json(["error": .string(error.description)], status: .serviceUnavailable)
        }
    }
}

private func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
    Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: value.serializedBytes)))
}

private func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
    json(["error": .string(message)], status: status)
}

private func readJSON(_ request: Request) async throws -> JSONValue {
    var request = request
    let buffer = try await request.collectBody(upTo: 1 << 20)
    guard let value = JSONValue.parse(buffer.readableBytesView) else {
        throw HTTPError(.badRequest, message: "body must be JSON")
    }
    return value
}

/// `Authorization: Bearer <token>` on every route but `/health` and `/openapi.yaml`, compared in constant time.
struct AdminAuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let token: [UInt8]

    init(token: String) {
        self.token = Array(token.utf8)
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // The status page itself holds no data (it asks for the token and calls the API with it).
        if ["/health", "/openapi.yaml", "/ui"].contains(request.uri.path) { return try await next(request, context) }
        guard let credentials = Self.bearerCredentials(request.headers[.authorization] ?? ""),
              Self.constantTimeEquals(credentials, token) else {
            return Response(status: .unauthorized, headers: [.contentType: "application/json", .wwwAuthenticate: "Bearer"],
                            body: .init(byteBuffer: ByteBuffer(string: #"{"error":"missing or invalid admin token"}"#)))
        }
        do {
            return try await next(request, context)
        } catch let error as HTTPError {
            return Response(status: error.status, headers: [.contentType: "application/json"],
                            body: .init(byteBuffer: ByteBuffer(bytes: JSONValue.object(["error": .string(error.body ?? "\(error.status)")]).serializedBytes)))
        }
    }

    /// The credentials of `Bearer <credentials>`: the scheme in any case (RFC 9110 §11.1),
    /// then one or more spaces; `nil` for another scheme or none.
    static func bearerCredentials(_ header: String) -> [UInt8]? {
        let bytes = Array(header.utf8)
        let scheme = Array("bearer".utf8)
        guard bytes.count > scheme.count, bytes[scheme.count] == UInt8(ascii: " "),
              zip(bytes, scheme).allSatisfy({ ASCIICase.lowered($0) == $1 }) else { return nil }
        let start = bytes[scheme.count...].firstIndex { $0 != UInt8(ascii: " ") } ?? bytes.count
        return Array(bytes[start...])
    }

    /// Time depends only on the lengths, never on where the first difference is.
    static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(truncatingIfNeeded: a.count ^ b.count)
        for i in 0..<max(a.count, b.count) {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= x ^ y
        }
        return difference == 0
    }
}
