import NIOHTTP1

/// The documented, human-readable cache key (docs/configuration.md):
///
///     METHOD SP upstream-base-URL path ["?" sorted-params] [SP "user=" id] SP "v=" version
///
/// e.g. `GET https://api.example.com/api/items?limit=10&offset=0 v=1`. Regex invalidation
/// runs over this text.
public enum CacheKey {
    /// Builds the key.
    /// - Parameters:
    ///   - params: query and form/JSON-top-level body params as sent upstream (token excluded by the caller or via `excluding`).
    ///   - excluding: volatile param names and the injected-token names.
    public static func make(method: String, upstreamBaseURL: String, path: String, params: [Param],
                            excluding: Set<String>, userID: String?, version: Int) -> String {
        make(method: method, upstreamBaseURL: upstreamBaseURL, path: path, paramBytes: params.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 2 },
             hasParams: !params.isEmpty, userID: userID, version: version) { key in
            QueryString.writeKeyCanonical(params, excluding: excluding, into: &key)
        }
    }

    /// ``make(method:upstreamBaseURL:path:params:excluding:userID:version:)`` with the params
    /// of a query as received (and no others), read from its text.
    public static func make(method: String, upstreamBaseURL: String, path: String, rawQuery: Substring,
                            excluding: ExcludedParams, userID: String?, version: Int) -> String {
        make(method: method, upstreamBaseURL: upstreamBaseURL, path: path, paramBytes: rawQuery.utf8.count,
             hasParams: !rawQuery.isEmpty, userID: userID, version: version) { key in
            QueryString.writeKeyCanonical(rawQuery: rawQuery, excluding: excluding, into: &key)
        }
    }

    private static func make(method: String, upstreamBaseURL: String, path: String, paramBytes: Int, hasParams: Bool,
                             userID: String?, version: Int, writeParams: (inout TextBuilder) -> Void) -> String {
        var key = TextBuilder(capacity: method.utf8.count + upstreamBaseURL.utf8.count + path.utf8.count + 16
                              + paramBytes + (userID?.utf8.count ?? 0))
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
        if let userID {
            key.append(" user=" as StaticString)
            key.append(QueryString.percentEncode(userID))
        }
        key.append(" v=" as StaticString)
        key.append(version)
        return key.text
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
    public static func of(_ endpoint: EndpointPolicy, injects: Bool, appToken: Bool, session: SessionTokens?,
                          clientToken: Bool, clientCredentials: Bool = false) -> CacheScope {
        if endpoint.cache.scope == .shared, endpoint.scopeIsExplicit { return .shared }
        if appToken, injects { return clientCredentials ? .notStorable : .shared }
        if let session, injects { return .user(session.cacheUser) }
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
