import NIOHTTP1

/// Request fields that change what an upstream takes as its host, URL, scheme or method, and
/// that a cache key does not hold: an upstream that reflects them (a link built from
/// `X-Forwarded-Host`) would have its reply stored for every client. On a cached endpoint
/// they are therefore not forwarded, unless the endpoint lists them in `cache.key_headers`,
/// which forwards them and puts their values in the key (``keyPart(_:keyHeaders:)``).
public enum UnkeyedRequestFields {
    /// The fields dropped on cached endpoints (lowercase).
    public static let names = ["x-forwarded-host", "x-forwarded-proto", "x-original-url", "x-rewrite-url",
                               "x-http-method-override", "forwarded"]

    /// Fields that `cache.key_headers` may not name: their values are credentials, and keys are
    /// listed by the admin API and matched by patterns.
    public static let credentialNames: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    /// The fields a cached endpoint drops: ``names`` less those in `keyHeaders` (lowercase).
    public static func dropped(keyHeaders: [String]) -> [String] {
        keyHeaders.isEmpty ? names : names.filter { !keyHeaders.contains($0) }
    }

    /// The key's part for `cache.key_headers`: ` headers=` and `name:value` for each listed
    /// field the request carries, in the list's order, joined by `&` (several lines of one
    /// field joined by `,`, each value percent-encoded as a query value is). Empty when the
    /// request carries none of them, so its key is the one it has without the setting.
    public static func keyPart(_ headers: HTTPHeaders, keyHeaders: [String]) -> String {
        var part = ""
        for name in keyHeaders {
            let values = headers[name]
            guard !values.isEmpty else { continue }
            part += part.isEmpty ? " headers=" : "&"
            part += name + ":" + QueryString.percentEncode(values.joined(separator: ","))
        }
        return part
    }

    /// The key of the URL a key belongs to: the key up to its version (`… v=N`), without the
    /// parts that follow it (``keyPart(_:keyHeaders:)``, a `Vary` variant's ` vary=`). A key
    /// holds no other space after its method: parameters and user ids are percent-encoded.
    public static func urlKey(of key: String) -> Substring {
        guard let version = key.range(of: " v=") else { return key[...] }
        let end = key[version.upperBound...].firstIndex(of: " ") ?? key.endIndex
        return key[..<end]
    }
}
