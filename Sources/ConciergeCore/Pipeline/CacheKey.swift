import Crypto
import NIOHTTP1

/// The documented, human-readable cache key (docs/caching.md):
///
///     METHOD SP upstream-base-URL path ["?" query-params] [SP body] [SP "user=" id] SP "v=" version
///
/// e.g. `GET https://api.example.com/api/items?limit=10&offset=0 v=1`. Regex invalidation
/// runs over this text. Different requests never share a key: params are sorted by name only
/// (pairs of one name keep their order), the body has a part of its own (``writeBody(_:excluding:into:)``:
/// `form:` pairs, `json:` typed members, or `body=` and a digest of any other bytes), and every
/// piece is percent-encoded, so no value can fake a separator. Parts that tell variants of one
/// URL apart follow `v=` (`headers=` of `cache.key_headers`, added by ``PreparedRequest``; a
/// `Vary` variant's `vary=`): an unsafe request in `mode: http` finds a URL's entries as the
/// keys that begin with the URL's key up to `v=N` and a space.
public enum CacheKey {
    /// Builds the key.
    /// - Parameters:
    ///   - params: the query's params as sent upstream (token excluded by the caller or via `excluding`).
    ///   - body: the request body as sent upstream, before the token and the signature.
    ///   - excluding: volatile param names and the injected-token names (query and body alike).
    public static func make(method: String, upstreamBaseURL: String, path: String, params: [Param], body: RequestBody = .empty,
                            excluding: Set<String>, userID: String?, version: Int) -> String {
        make(method: method, upstreamBaseURL: upstreamBaseURL, path: path, params: params, body: body,
             excluding: ExcludedParams(excluding), userID: userID, version: version)
    }

    /// ``make(method:upstreamBaseURL:path:params:body:excluding:userID:version:)`` with the
    /// exclusions made once a configuration.
    public static func make(method: String, upstreamBaseURL: String, path: String, params: [Param], body: RequestBody = .empty,
                            excluding: ExcludedParams, userID: String?, version: Int) -> String {
        make(method: method, upstreamBaseURL: upstreamBaseURL, path: path,
             paramBytes: params.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 2 }, hasParams: !params.isEmpty,
             body: body, excluding: excluding, userID: userID, version: version) { key in
            QueryString.writeKeyCanonical(params, excluding: excluding, into: &key)
        }
    }

    /// ``make(method:upstreamBaseURL:path:params:body:excluding:userID:version:)`` with the
    /// params of a query as received (and no others), read from its text.
    public static func make(method: String, upstreamBaseURL: String, path: String, rawQuery: Substring, body: RequestBody = .empty,
                            excluding: ExcludedParams, userID: String?, version: Int) -> String {
        make(method: method, upstreamBaseURL: upstreamBaseURL, path: path, paramBytes: rawQuery.utf8.count, hasParams: !rawQuery.isEmpty,
             body: body, excluding: excluding, userID: userID, version: version) { key in
            QueryString.writeKeyCanonical(rawQuery: rawQuery, excluding: excluding, into: &key)
        }
    }

    private static func make(method: String, upstreamBaseURL: String, path: String, paramBytes: Int, hasParams: Bool,
                             body: RequestBody, excluding: ExcludedParams, userID: String?, version: Int,
                             writeParams: (inout TextBuilder) -> Void) -> String {
        var key = TextBuilder(capacity: method.utf8.count + upstreamBaseURL.utf8.count + path.utf8.count + 16
                              + paramBytes + bodyBytes(body) + (userID?.utf8.count ?? 0))
        key.append(method)
        key.append(byte: UInt8(ascii: " "))
        key.append(upstreamBaseURL)
        key.append(path)
        if hasParams {
            key.append(byte: UInt8(ascii: "?"))
            let before = key.count
            writeParams(&key)
            // Every param excluded (or none written): no `?`.
            if key.count == before { key.removeLast() }
        }
        writeBody(body, excluding: excluding, into: &key)
        if let userID {
            key.append(" user=" as StaticString)
            key.append(QueryString.percentEncode(userID))
        }
        key.append(" v=" as StaticString)
        key.append(version)
        return key.text
    }

    /// How many hex characters of the body's SHA-256 the key holds (128 bits).
    static let digestCharacters = 32

    /// The body's part of the key, after a space: nothing for no body; `form:` and the form's
    /// pairs (normalised as the query's); `json:` and a JSON object's top-level members,
    /// a string as `name=text`, any other value as `name:=literal` (so `1`, `"1"`, `true` and
    /// `null` differ; `:` in a name is escaped, so `:=` is never part of one); and for any other
    /// body (XML, GraphQL, a JSON array or scalar, binary, a form that is not UTF-8) `body=` and
    /// the first ``digestCharacters`` hex characters of the SHA-256 of its bytes.
    static func writeBody(_ body: RequestBody, excluding: ExcludedParams, into key: inout TextBuilder) {
        switch body {
        case .empty:
            return
        case .form(let params, _):
            key.append(" form:" as StaticString)
            QueryString.writeKeyCanonical(params, excluding: excluding, into: &key)
        case .json(let object):
            key.append(" json:" as StaticString)
            writeMembers(object, excluding: excluding, into: &key)
        case .opaque(let bytes):
            key.append(" body=" as StaticString)
            var hash = SHA256()
            bytes.withUnsafeBytes { hash.update(bufferPointer: $0) }
            let hex = "0123456789abcdef" as StaticString
            for byte in hash.finalize().prefix(digestCharacters / 2) {
                key.append(byte: hex.utf8Start[Int(byte >> 4)])
                key.append(byte: hex.utf8Start[Int(byte & 0x0F)])
            }
        }
    }

    /// A JSON object's top-level members, excluded names left out, ordered by name.
    private static func writeMembers(_ object: JSONObjectText, excluding: ExcludedParams, into key: inout TextBuilder) {
        var pairs = KeyPairs(scratch: 3 * object.bytes.count, pairs: object.members.count)
        for member in object.members where !excluding.excludes(member.name) {
            let text = object.literal(of: member)
            guard text.first == UInt8(ascii: "\"") else {
                pairs.add(name: member.name, value: text, literal: true)
                continue
            }
            if !text.contains(UInt8(ascii: "\\")) {
                // No escapes: the text between the quotes is the string (the scan checked its UTF-8).
                pairs.add(name: member.name, value: text.dropFirst().dropLast(), literal: false)
            } else if case .string(let decoded)? = object.value(at: member) {
                pairs.add(name: member.name, value: decoded.utf8, literal: false)
            } else {
                pairs.add(name: member.name, value: text, literal: true)
            }
        }
        pairs.write(into: &key)
    }

    /// About how many bytes the body's part takes, to reserve them.
    private static func bodyBytes(_ body: RequestBody) -> Int {
        switch body {
        case .empty: return 0
        case .form(_, let original): return original.count + 16
        case .json(let object): return object.bytes.count + 16
        case .opaque: return 6 + digestCharacters
        }
    }
}

/// Whose entry a cacheable request reads and writes (docs/configuration.md, cache scopes): the decision beside
/// the key it feeds.
public enum CacheScope: Sendable, Equatable {
    /// One entry for every client.
    case shared
    /// One entry per user (the key carries `user=`).
    case user(String)
    /// A token Concierge cannot attribute to a user: never shared, so never stored.
    case notStorable

    /// - Parameters:
    ///   - injects: Concierge injects its own token into this request.
    ///   - appToken: the session is an app token (`session.app_token`): one for everyone.
    ///   - session: the current user session, if any.
    ///   - clientToken: the client sent a token of its own in an injection point.
    ///   - clientCredentials: the client sent its own `Authorization` or `Cookie` (one that
    ///     Concierge does not replace): a reply to it may be that client's alone, so it is
    ///     neither served from nor stored into a shared entry, as a shared cache must not
    ///     (RFC 9111 §3.5), unless the endpoint says `scope: shared`.
    ///   - sessionName: the session the request uses; `scope: session` keys by it.
    ///   - identity: what keys of that session carry besides the user (``SessionSlot/cacheIdentity``):
    ///     `nil` for `default`, whose keys are those of a daemon with one session.
    public static func of(_ endpoint: EndpointPolicy, injects: Bool, appToken: Bool, session: SessionTokens?,
                          sessionName: String = "default", identity: String? = nil,
                          clientToken: Bool, clientCredentials: Bool = false) -> CacheScope {
        if endpoint.cache.scope == .shared, endpoint.scopeIsExplicit { return .shared }
        let sessionScoped = endpoint.cache.scope == .session || appToken && identity != nil
        if appToken, injects { return clientCredentials ? .notStorable : sessionScoped ? .user("@" + sessionName) : .shared }
        if endpoint.cache.scope == .session, injects { return clientCredentials ? .notStorable : .user("@" + sessionName) }
        if let session, injects { return .user(identity.map { "\($0)/\(session.cacheUser)" } ?? session.cacheUser) }
        if clientToken || clientCredentials || endpoint.cache.scope == .user { return .notStorable }
        return .shared
    }

    /// Whether `headers` carry the client's own credentials: a `Cookie`, or an `Authorization`
    /// that Concierge's injection does not replace. Read by bytes, on every cacheable request.
    public static func carriesClientCredentials(_ headers: HTTPHeaders, authorizationReplaced: Bool) -> Bool {
        for (name, _) in headers {
            switch name.utf8.count {
            case 6 where ASCIICase.equals(name, lowercase: "cookie"): return true
            case 13 where !authorizationReplaced && ASCIICase.equals(name, lowercase: "authorization"): return true
            default: continue
            }
        }
        return false
    }

    /// The `user=` part of the key.
    public var userID: String? {
        if case .user(let id) = self { return id }
        return nil
    }
}
