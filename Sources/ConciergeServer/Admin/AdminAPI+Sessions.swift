import ConciergeCore
import ConciergeStorage
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// `GET /sessions`, `GET /sessions/NAME`, `DELETE /sessions/NAME` and
/// `DELETE /sessions/NAME/instances/ID` (docs/sessions.md); `/session` acts on `default`.
extension AdminAPI {
    func addSessionRoutes(_ router: Router<BasicRequestContext>) {
        router.get("/sessions") { _, _ in
            Self.reply(["sessions": .array(sessionUnits().map(describe))])
        }
        router.get("/sessions/:name") { _, context in
            guard let unit = sessionUnit(context.parameters.get("name") ?? "") else { return Self.noSession(context) }
            return Self.reply(describe(unit))
        }
        router.delete("/sessions/:name") { _, context in
            guard let unit = sessionUnit(context.parameters.get("name") ?? "") else { return Self.noSession(context) }
            let count: Int
            if let sessions = control.sessions {
                count = await sessions.logout(unit, reason: "admin")
            } else {
                count = await unit.lifecycle.logout(ifAccessToken: nil, reason: "admin") == nil ? 0 : 1
            }
            return Self.reply(["logged_out": .int(Int64(count))])
        }
        router.delete("/sessions/:name/instances/:id") { _, context in
            let id = context.parameters.get("id") ?? ""
            guard SessionUnit.isInstanceID(id) else {
                return Self.reply(["error": "invalid instance id: 16-128 characters of A-Z a-z 0-9 . _ ~ -"], status: .badRequest)
            }
            guard let unit = sessionUnit(context.parameters.get("name") ?? "") else { return Self.noSession(context) }
            guard unit.instances != nil, let sessions = control.sessions else {
                return Self.reply(["error": .string("session '\(unit.name)' has no per_client instances")], status: .notFound)
            }
            let instance = try await sessions.instance(of: unit, id: id)
            let dropped = await instance?.lifecycle.logout(ifAccessToken: nil, reason: "admin")
            return Self.reply(["logged_out": .bool(dropped != nil)])
        }
    }

    /// Every session, `default` alone without a registry.
    private func sessionUnits() -> [SessionUnit] {
        control.sessions?.all ?? []
    }

    private func sessionUnit(_ name: String) -> SessionUnit? {
        control.sessions?.unit(named: name)
    }

    /// A session in `/sessions`: name, kind, state, user, expiry, last refresh, pacing and
    /// instance count; never a token.
    func describe(_ unit: SessionUnit) -> JSONValue {
        let config = control.runtime.current
        let settings = config.sessionSettings(unit.name)
        let formatter = ISO8601DateFormatter()
        let date: (Date?) -> JSONValue = { $0.map { .string(formatter.string(from: $0)) } ?? .null }
        let tokens = unit.currentTokens.flatMap { $0.kind == settings.kind ? $0 : nil }
        let pacing = unit.state.pacing.retryAfter(at: unit.lifecycle.clock.now)
        var out: [String: JSONValue] = [
            "name": .string(unit.name), "kind": .string(settings.kind.rawValue),
            "state": .string(tokens != nil ? "active" : unit.instances != nil ? "per_client" : "logged_out"),
            "user": tokens?.userID.map(JSONValue.string) ?? .null, "expires_at": date(tokens?.expiresAt),
            "last_refresh": date(tokens?.setAt),
            "pacing": ["retry_after": pacing.map { .int(Int64($0)) } ?? .null],
            "instances": .null,
        ]
        if let table = unit.instances {
            out["instances"] = ["live": .int(Int64(table.liveCount)), "loaded": .int(Int64(table.loadedCount)),
                                "max": .int(Int64(settings.perClient?.max ?? 0))]
        }
        return .object(out)
    }

    /// The key pattern of a session's user- and session-scoped entries (`{"session": NAME}`):
    /// their `user=` part starts with the name (``CacheScope/of(_:injects:appToken:session:sessionName:identity:clientToken:clientCredentials:)``).
    static func sessionPattern(_ name: String) -> String {
        name == "default" ? #" user=(?!%40|[a-z0-9_-]+(?:%2F|%23))"# + "|(?i) user=%40default "
            : "(?i) user=(?:%40\(name) |\(name)(?:%2F|%23))"
    }

    /// `{"session": NAME}`: the pattern of that session's entries, compiled; `nil` when the
    /// configuration has no such session.
    func sessionSelector(_ name: String) -> (source: String, pattern: KeyPattern)? {
        guard control.runtime.current.settings.sessions[name] != nil || name == "default" else { return nil }
        let source = Self.sessionPattern(name)
        return (try? KeyPattern(source)).map { (source, $0) }
    }

    private static func noSession(_ context: BasicRequestContext) -> Response {
        reply(["error": .string("no session named '\(context.parameters.get("name") ?? "")'")], status: .notFound)
    }

    static func reply(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: value.serializedBytes)))
    }
}
