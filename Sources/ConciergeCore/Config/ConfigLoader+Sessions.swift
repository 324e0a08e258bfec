import Foundation
import NIOHTTP1
import Yams

/// The sessions: `session:` (the one named `default`) and `sessions:` (named ones, each with
/// every key of `session:`), and which session each endpoint uses.
extension ConfigLoader {
    /// What `session:` and `sessions:` hold.
    struct SessionsRead {
        var byName: [String: ConciergeConfig.Session] = [:]
        var names: [String] = []
        /// The node of each session's `capture.endpoint`, for errors about it.
        var captureNodes: [String: Node] = [:]
        var sessionsNode: Node? = nil
        /// `session` for the one `session:` holds, else `sessions.NAME`.
        func path(_ name: String) -> String { name == "default" && fromSessionKey ? "session" : "sessions.\(name)" }
        var fromSessionKey = false

        /// The `default` session, or one that injects and captures nothing.
        var defaultSession: ConciergeConfig.Session {
            byName["default"] ?? .none
        }
    }

    /// A session name: 1-32 characters of `a-z`, `0-9`, `_` and `-`.
    public static func isSessionName(_ name: some StringProtocol) -> Bool {
        (1...32).contains(name.utf8.count) && name.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
        }
    }

    /// `session` and `sessions`.
    static func sessionsSection(_ top: [String: Node], _ r: YAMLReader, upstreamNames: Set<String>) -> SessionsRead {
        var read = SessionsRead()
        if let node = top["session"] {
            let (session, captureNode) = sessionBlock(node, "session", r, upstreamNames: upstreamNames)
            read.byName["default"] = session
            read.names.append("default")
            read.fromSessionKey = true
            if let captureNode { read.captureNodes["default"] = captureNode }
        }
        guard let node = top["sessions"] else { return read }
        read.sessionsNode = node
        r.declareKeys("sessions", [])
        for (name, value) in r.pairs(node, "sessions") {
            let path = "sessions.\(name)"
            guard isSessionName(name) else {
                r.fail(path, value, "invalid session name '\(HTTPFieldSyntax.printable(name))' (1-32 characters of a-z, 0-9, _ and -)")
                continue
            }
            if read.byName[name] != nil {
                r.fail(path, value, name == "default" ? "session: is already the session named default" : "duplicate session '\(name)'")
                continue
            }
            r.schemaAlias = (path, "session")
            let (session, captureNode) = sessionBlock(value, path, r, upstreamNames: upstreamNames)
            r.schemaAlias = nil
            read.byName[name] = session
            read.names.append(name)
            if let captureNode { read.captureNodes[name] = captureNode }
        }
        if read.names.isEmpty { r.fail("sessions", node, "names no session") }
        return read
    }

    /// `per_client`: one instance of the session per caller-chosen id.
    static func perClient(_ node: Node, _ p: String, _ r: YAMLReader) -> ConciergeConfig.PerClient? {
        guard let m = r.mapping(node, p, allowed: ["header", "max", "idle"]) else { return nil }
        var perClient = ConciergeConfig.PerClient()
        if let v = m["header"], let s = r.nonEmptyString(v, "\(p).header") {
            if HTTPFieldSyntax.isToken(s) { perClient.header = s } else {
                r.fail("\(p).header", v, "invalid header name '\(HTTPFieldSyntax.printable(s))' (must be an RFC 9110 token)")
            }
        }
        if let v = m["max"], let n = r.int(v, "\(p).max", range: 1...10_000_000) { perClient.max = n }
        if let v = m["idle"], let d = r.duration(v, "\(p).idle") {
            if d > .zero { perClient.idle = d } else { r.fail("\(p).idle", v, "must be greater than 0") }
        }
        return perClient
    }

    /// One session's keys (`session`, or `sessions.NAME` at path `p`): where the token goes,
    /// how it is captured and renewed.
    static func sessionBlock(_ node: Node?, _ p: String, _ r: YAMLReader, upstreamNames: Set<String>) -> (ConciergeConfig.Session, captureNode: Node?) {
        var session = ConciergeConfig.Session(inject: [], capture: nil, refresh: nil,
                                              notLoggedIn: CannedReply(status: 401, body: ["code": 800, "msg": "not logged in"]))
        var captureNode: Node? = nil
        var tokenUpstreamNodes: [(path: String, node: Node, name: String)] = []
        if let node, let m = r.mapping(node, p, allowed: [
            "inject", "capture", "refresh", "not_logged_in", "app_token", "refresh_on_status", "refresh_ahead", "max_refreshes", "revoke",
            "per_client", "clients",
        ]) {
            if let n = m["clients"] { session.clients = sessionClients(n, "\(p).clients", r) }
            if let n = m["inject"] { session.inject = injectPoints(n, "\(p).inject", r) }
            if let n = m["per_client"] { session.perClient = perClient(n, "\(p).per_client", r) }
            if let n = m["capture"], let cm = r.mapping(n, "\(p).capture", allowed: [
                "endpoint", "access_token", "refresh_token", "user_id", "expires_in", "redact",
            ]) {
                captureNode = cm["endpoint"] ?? n
                let endpoint = cm["endpoint"].flatMap { r.nonEmptyString($0, "\(p).capture.endpoint") }
                let access = cm["access_token"].flatMap { r.nonEmptyString($0, "\(p).capture.access_token") }
                if cm["endpoint"] == nil { r.fail("\(p).capture.endpoint", n, "missing: the login endpoint's name") }
                if cm["access_token"] == nil { r.fail("\(p).capture.access_token", n, "missing: path of the access token in the login reply") }
                if let endpoint, let access {
                    var capture = ConciergeConfig.Capture(
                        endpoint: endpoint, accessToken: access,
                        refreshToken: cm["refresh_token"].flatMap { r.nonEmptyString($0, "\(p).capture.refresh_token") },
                        userID: cm["user_id"].flatMap { r.nonEmptyString($0, "\(p).capture.user_id") })
                    capture.expiresIn = cm["expires_in"].flatMap { r.nonEmptyString($0, "\(p).capture.expires_in") }
                    if let v = cm["redact"], let b = r.bool(v, "\(p).capture.redact") { capture.redact = b }
                    session.capture = capture
                }
            }
            if let n = m["refresh"], let t = tokenEndpoint(n, "\(p).refresh", r, defaultMethod: "POST", upstreamNodes: &tokenUpstreamNodes) {
                session.refresh = t
            }
            if let n = m["revoke"] {
                session.revoke = tokenEndpoint(n, "\(p).revoke", r, defaultMethod: "POST", upstreamNodes: &tokenUpstreamNodes, readsReply: false)
            }
            if let n = m["app_token"], let t = tokenEndpoint(n, "\(p).app_token", r, defaultMethod: "GET", upstreamNodes: &tokenUpstreamNodes) {
                session.appToken = t
                for other in ["capture", "refresh"] where m[other] != nil {
                    r.fail("\(p).app_token", n, "app_token cannot be combined with \(p).\(other) (line \((m[other]?.mark?.line).map(String.init) ?? "?")): an app token replaces the user login")
                }
                if m["inject"] == nil { r.fail("\(p).app_token", n, "needs session.inject: where the app token goes in each request") }
            }
            if let n = m["refresh_on_status"], let list = r.intList(n, "\(p).refresh_on_status") {
                for (i, status) in list.enumerated() where !(400...499).contains(status) {
                    r.fail("\(p).refresh_on_status[\(i)]", n, "expected a 4xx status, found \(status)")
                }
                session.refreshOnStatus = Set(list.filter { (400...499).contains($0) })
            }
            if let n = m["refresh_ahead"], let d = r.duration(n, "\(p).refresh_ahead") { session.refreshAhead = d }
            if let n = m["max_refreshes"], let lm = r.mapping(n, "\(p).max_refreshes", allowed: ["count", "within"]) {
                if let v = lm["count"], let c = r.int(v, "\(p).max_refreshes.count", range: 1...1000) { session.maxRefreshes.count = c }
                if let v = lm["within"], let d = r.duration(v, "\(p).max_refreshes.within") {
                    if d > .zero { session.maxRefreshes.within = d } else { r.fail("\(p).max_refreshes.within", v, "must be greater than 0") }
                }
            }
            if let n = m["not_logged_in"], let c = cannedReply(n, "\(p).not_logged_in", r) { session.notLoggedIn = c }
        }
        for check in tokenUpstreamNodes where !upstreamNames.contains(check.name) {
            r.fail(check.path, check.node, "names no upstream: '\(check.name)' (known: \(upstreamNames.sorted().joined(separator: ", ")))")
        }
        return (session, captureNode)
    }

    /// `session.inject`: where the access token goes in each request.
    static func injectPoints(_ node: Node, _ p: String, _ r: YAMLReader) -> [InjectionPoint] {
        var points: [InjectionPoint] = []
        guard let items = r.sequence(node, p) else { return points }
        for (i, item) in items.enumerated() {
            let path = "\(p)[\(i)]"
            guard let im = r.mapping(item, path, allowed: ["query", "header", "format", "body"]) else { continue }
            let places = ["query", "header", "body"].filter { im[$0] != nil }
            guard places.count == 1 else {
                r.fail(path, item, "give exactly one of query, header or body")
                continue
            }
            if let q = im["query"], let s = r.nonEmptyString(q, "\(path).query") {
                points.append(.query(name: s))
            } else if let h = im["header"], let s = r.nonEmptyString(h, "\(path).header") {
                if !HTTPFieldSyntax.isToken(s) { r.fail("\(path).header", h, "invalid header name '\(HTTPFieldSyntax.printable(s))' (must be an RFC 9110 token)") }
                var format = "{access_token}"
                if let f = im["format"], let fs = r.nonEmptyString(f, "\(path).format") {
                    if !fs.contains("{access_token}") { r.fail("\(path).format", f, "must contain {access_token}") }
                    if !HTTPFieldSyntax.isFieldValue(fs) { r.fail("\(path).format", f, "not a valid header value (control characters or surrounding white space)") }
                    format = fs
                }
                points.append(.header(name: s, format: format))
            } else if let b = im["body"], let s = r.nonEmptyString(b, "\(path).body") {
                points.append(.body(field: s))
            }
            if im["format"] != nil, im["header"] == nil { r.fail("\(path).format", im["format"], "format applies to header injection only") }
        }
        return points
    }


    // MARK: Which session each endpoint uses

    /// Checks the sessions against the endpoints and listeners, and gives each session's login
    /// endpoint (`capture.endpoint`) that session when it names none.
    /// - Parameter listenerSessions: the sessions proxy listeners name.
    static func assignSessions(_ endpoints: inout [EndpointPolicy], _ sessions: SessionsRead, endpointsNode: Node?,
                               listen: ConciergeConfig.Listen, listenerSessions: [String] = [], _ r: YAMLReader) {
        let endpointNames = Set(endpoints.map(\.name))
        for name in sessions.names {
            guard let session = sessions.byName[name] else { continue }
            let path = sessions.path(name)
            if let capture = session.capture, !endpointNames.contains(capture.endpoint) {
                r.fail("\(path).capture.endpoint", sessions.captureNodes[name], "names no endpoint: '\(capture.endpoint)'")
            }
            if session.perClient != nil, session.appToken != nil {
                r.fail("\(path).per_client", sessions.sessionsNode, "an app token is one for everyone: per_client needs a user login (capture)")
            }
        }
        for (i, endpoint) in endpoints.enumerated() {
            let node = endpointNode(endpointsNode, i)
            if let name = endpoint.session {
                if sessions.byName[name] == nil {
                    r.fail("endpoints[\(i)].session", node?["session"], "names no session: '\(name)' (known: \(sessions.names.joined(separator: ", ")))")
                }
                continue
            }
            let capturing = sessions.names.filter { sessions.byName[$0]?.capture?.endpoint == endpoint.name }
            if capturing.count == 1, capturing[0] != "default" { endpoints[i].session = capturing[0] }
        }
        // Without `sessions:` there is always a `default` (empty without `session:`, as ever).
        let reachable = sessions.sessionsNode == nil || sessions.byName["default"] != nil || listen.sessionHeader || !listenerSessions.isEmpty
        guard !reachable else { return }
        for (i, endpoint) in endpoints.enumerated() where endpoint.session == nil && endpoint.login != .none {
            r.fail("endpoints[\(i)].session", endpointNode(endpointsNode, i),
                   "login: \(endpoint.login.rawValue) needs a session, and no session is named default: name one here, or set listen.session_header: true")
        }
    }

    private static func endpointNode(_ node: Node?, _ i: Int) -> Node? {
        guard case .sequence(let items)? = node, i < items.count else { return nil }
        return Array(items)[i]
    }
}
