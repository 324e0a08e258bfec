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
        var key = method
        key += " "
        key += upstreamBaseURL
        key += path
        let kept = excluding.isEmpty ? params : params.filter { !excluding.contains($0.name) }
        if !kept.isEmpty {
            key += "?"
            key += QueryString.canonical(kept)
        }
        if let userID {
            key += " user="
            key += QueryString.percentEncode(userID)
        }
        key += " v="
        key += String(version)
        return key
    }
}
