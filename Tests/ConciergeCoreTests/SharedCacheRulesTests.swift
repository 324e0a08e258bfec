import ConciergeCore
import NIOHTTP1
import Testing

/// What a shared cache in `mode: http` keeps from one client away from another, pure: replies
/// to a request with `Authorization` (RFC 9111 §3.5), `Set-Cookie`, the forwarding fields an
/// upstream may reflect, and the configuration keys behind them.
@Suite("Shared cache rules")
struct SharedCacheRulesTests {
    static let now = 1_800_000_000.0
    static let authorized = HTTPHeaders([("Authorization", "Bearer mine")])

    static func storedForAuthorized(_ cacheControl: String) -> HTTPCaching.Freshness? {
        HTTPCaching.storage(request: authorized, status: 200, reply: HTTPHeaders([("Cache-Control", cacheControl)]), defaultTTL: 0,
                            maxTTL: nil, endpointStale: (0, 0), now: now)
    }

    @Test("a reply to a request with Authorization is shared only with public, s-maxage or must-revalidate")
    func authorizationNeedsAnAllowingDirective() {
        for allowing in ["public, max-age=60", "s-maxage=60", "max-age=60, must-revalidate"] {
            #expect(HTTPCaching.sharesAuthorizedReplies(HTTPHeaders([("Cache-Control", allowing)])), "\(allowing)")
            #expect(Self.storedForAuthorized(allowing)?.ttl == 60, "\(allowing) is stored")
        }
        for not in ["max-age=60", "max-age=60, proxy-revalidate", "no-cache", ""] {
            #expect(!HTTPCaching.sharesAuthorizedReplies(HTTPHeaders([("Cache-Control", not)])), "\(not)")
            #expect(Self.storedForAuthorized(not) == nil, "'\(not)' is not stored")
        }
        #expect(!HTTPCaching.sharesAuthorizedReplies(HTTPHeaders()), "no Cache-Control at all")
        #expect(HTTPCaching.sharesAuthorizedReplies(HTTPHeaders([("CDN-Cache-Control", "s-maxage=5"), ("Cache-Control", "max-age=5")])),
                "the targeted field decides when present")
    }

    @Test("Set-Cookie: not stored by default; with store_set_cookie stored without the field, other fields kept")
    func setCookieIsNeverStoredWithTheReply() {
        let reply = HTTPHeaders([("Cache-Control", "max-age=60"), ("Set-Cookie", "sid=alice"), ("set-cookie", "theme=dark"), ("ETag", "\"1\"")])
        #expect(HTTPCaching.storedFields(reply, storeSetCookie: false) == nil)
        let kept = HTTPCaching.storedFields(reply, storeSetCookie: true)
        #expect(kept?.contains(name: "set-cookie") == false)
        #expect(kept?.first(name: "etag") == "\"1\"" && kept?.first(name: "cache-control") == "max-age=60")
        let plain = HTTPHeaders([("Cache-Control", "max-age=60")])
        #expect(HTTPCaching.storedFields(plain, storeSetCookie: false) == plain, "a reply without a cookie is stored as it is")
    }

    @Test("forwarding fields: all six dropped on cached endpoints, but those listed in key_headers, which enter the key")
    func forwardingFieldsAreDroppedOrKeyed() {
        #expect(Set(UnkeyedRequestFields.dropped(keyHeaders: [])) == ["x-forwarded-host", "x-forwarded-proto", "x-original-url",
                                                                       "x-rewrite-url", "x-http-method-override", "forwarded"])
        #expect(!UnkeyedRequestFields.dropped(keyHeaders: ["x-forwarded-host"]).contains("x-forwarded-host"))
        #expect(UnkeyedRequestFields.dropped(keyHeaders: ["x-forwarded-host"]).count == 5)
        let headers = HTTPHeaders([("X-Forwarded-Host", "evil.example"), ("Accept-Language", "de, fr")])
        #expect(UnkeyedRequestFields.keyPart(headers, keyHeaders: ["x-forwarded-host", "accept-language"])
                == " headers=x-forwarded-host:evil.example&accept-language:de%2C%20fr")
        #expect(UnkeyedRequestFields.keyPart(HTTPHeaders(), keyHeaders: ["x-forwarded-host"]) == "", "absent: the key without the setting")
        #expect(UnkeyedRequestFields.keyPart(HTTPHeaders([("X-Forwarded-Host", "a")]), keyHeaders: ["x-forwarded-host"])
                != UnkeyedRequestFields.keyPart(HTTPHeaders([("X-Forwarded-Host", "b")]), keyHeaders: ["x-forwarded-host"]))
    }

    @Test("a key's URL key: up to its version, without keyed headers or a Vary variant")
    func urlKeyOfAKey() {
        let url = "GET https://api.example.com/items?a=1 user=alice v=12"
        #expect(UnkeyedRequestFields.urlKey(of: url) == url)
        #expect(UnkeyedRequestFields.urlKey(of: url + " headers=x-forwarded-host:a") == url)
        #expect(UnkeyedRequestFields.urlKey(of: url + " headers=x-forwarded-host:a vary=accept:json") == url)
        #expect(UnkeyedRequestFields.urlKey(of: url + " vary=accept-language:de") == url)
    }

    @Test("config: store_set_cookie and key_headers at the top level and per endpoint; credentials and bad names refused")
    func configKeys() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams:
              release: https://api.example.com
            cache:
              mode: http
              store_set_cookie: true
              key_headers: [X-Forwarded-Host]
            endpoints:
              - name: catalog
                match: GET /api/catalog/**
                cache: { mode: http, store_set_cookie: true, key_headers: [X-Forwarded-Host, Forwarded, x-forwarded-host] }
            """)
        let catalog = try #require(config.endpoints.first)
        #expect(catalog.cache.storeSetCookie && catalog.cache.keyHeaders == ["x-forwarded-host", "forwarded"])
        #expect(config.cache.passThrough.cache.storeSetCookie && config.cache.passThrough.cache.keyHeaders == ["x-forwarded-host"])
        let defaults = try ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\n")
        #expect(!defaults.cache.passThrough.cache.storeSetCookie && defaults.cache.passThrough.cache.keyHeaders.isEmpty)
        for (bad, words) in [("Authorization", "carries credentials"), ("bad name", "not a header name")] {
            do {
                _ = try ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\ncache:\n  key_headers: [\"\(bad)\"]\n")
                Issue.record("\(bad) was accepted")
            } catch {
                #expect(error.issues.contains { $0.path == "cache.key_headers[0]" && $0.message.contains(words) }, "\(error.issues)")
            }
        }
    }
}
