import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// The hit memo's soundness as a property: for random requests, routes and sessions, a
/// recipe the memo hands out is what a fresh ``PreparedRequest/prepare(_:route:session:)``
/// gives (the same key and endpoint, a cacheable request that is not a bypass and passes the
/// login guard).
@Suite("Hit memo property")
struct HitMemoPropertyTests {
    static let yaml = """
        upstreams:
          api: http://upstream.test
          other: http://other.test
        environment: api
        common:
          params: { app_version: "2.1" }
        cache:
          volatile_params: [timestamp]
        session:
          inject:
            - header: Authorization
              format: "Bearer {access_token}"
        endpoints:
          - name: items
            match: GET /items
            cache: { ttl: 60s }
          - name: profile
            match: GET /profile
            login: required
            cache: { ttl: 60s }
          - name: shared
            match: GET /shared/{id}
            login: optional
            cache: { ttl: 60s, scope: shared }
          - name: plain
            match: GET /plain
        """

    /// SplitMix64: a seeded generator, so a failure replays.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let paths = ["/items", "/profile", "/shared/1", "/shared/2", "/plain", "/items/"]
    static let params = ["a=1", "a=2", "b=%20x", "timestamp=9", "app_version=1", "z=", "a=1&a=1"]
    static let headers: [(String, String)] = [("X-App", "1"), ("Cache-Control", "no-cache"), ("Authorization", "Bearer mine"),
                                              ("Cookie", "c=1"), ("Accept-Language", "zh"), ("x-concierge-cache", "BYPASS")]
    static let sessions: [SessionTokens?] = [
        nil,
        SessionTokens(accessToken: "t1", refreshToken: "r", userID: "u1", setAt: Date(timeIntervalSince1970: 1)),
        SessionTokens(accessToken: "t2", refreshToken: "r", userID: "u1", setAt: Date(timeIntervalSince1970: 1)),
        SessionTokens(accessToken: "t1", refreshToken: "r", userID: "u2", setAt: Date(timeIntervalSince1970: 1)),
    ]

    static func randomRequest(_ rng: inout SeededGenerator) -> IncomingRequest {
        var target = paths.randomElement(using: &rng)!
        let count = Int.random(in: 0...2, using: &rng)
        if count > 0 { target += "?" + (0..<count).map { _ in params.randomElement(using: &rng)! }.joined(separator: "&") }
        var fields: HTTPHeaders = ["Host": "127.0.0.1"]
        for (name, value) in headers where Int.random(in: 0..<8, using: &rng) == 0 { fields.add(name: name, value: value) }
        return IncomingRequest(method: "GET", target: target, headers: fields, body: .buffered(ByteBuffer()))
    }

    @Test("a recipe handed out equals a fresh prepare, for 20,000 random requests, routes and sessions")
    func recipeEqualsFreshPrepare() throws {
        let configs = [try ConfigLoader.parse(yaml: Self.yaml), try ConfigLoader.parse(yaml: Self.yaml)].map { RuntimeConfig(config: $0) }
        let memo = HitMemo()
        var rng = SeededGenerator(state: 2026)
        var found = 0
        for _ in 0..<20_000 {
            let incoming = Self.randomRequest(&rng)
            let route = PreparedRequest.Route(method: "GET", target: incoming.target, config: configs.randomElement(using: &rng)!,
                                              environment: ["api", "other"].randomElement(using: &rng)!)
            let session = Self.sessions.randomElement(using: &rng)!
            let received = PreparedRequest.Received(method: incoming.method, target: incoming.target, headers: incoming.headers,
                                                    body: ByteBuffer(), clientAddress: nil)
            let fresh = PreparedRequest.prepare(received, route: route, session: session)
            if let recipe = memo.recipe(for: incoming, route: route, session: session) {
                found += 1
                guard case .ready(let p) = fresh else {
                    Issue.record("a recipe for a request the login guard refuses: \(incoming.target)")
                    continue
                }
                #expect(p.cacheKey == recipe.key.text, "\(incoming.target) \(incoming.headers)")
                #expect(p.endpoint.name == recipe.endpoint.name)
                #expect(!p.bypass)
            }
            // As the fast path does after a fresh hot hit: remember cacheable, non-bypass requests.
            if case .ready(let p) = fresh, let key = p.hashedCacheKey, !p.bypass {
                memo.remember(incoming, route: route, session: session, key: key, endpoint: p.endpoint)
            }
        }
        #expect(found > 500, "the property was exercised (\(found) recipes found)")
    }
}
