import AsyncHTTPClient
import ConciergeSampleAPI
import Crypto
import ConciergeTestSupport
import Foundation
import Testing

/// End-to-end checks of the sample business API over real HTTP.
@Suite("SampleAPI")
struct SampleAPITests {
    /// A reply read whole: status, headers and body.
    struct Reply {
        let status: Int
        let headers: [String: String]
        let body: [UInt8]

        /// The body as a JSON object (empty when it is not one).
        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        }
        var code: Int? { json["code"] as? Int }
        var data: [String: Any] { json["data"] as? [String: Any] ?? [:] }
        var result: [String: Any] { data["result"] as? [String: Any] ?? [:] }
    }

    /// Starts a sample API on a free port, runs `body`, and always shuts the server down.
    func withSampleAPI(
        _ configuration: SampleAPIConfiguration = .init(),
        _ body: (RunningSampleAPI) async throws -> Void
    ) async throws {
        let api = try await SampleAPI.start(configuration: configuration)
        do {
            try await body(api)
        } catch {
            await api.shutdown()
            throw error
        }
        await api.shutdown()
    }

    func send(
        _ api: RunningSampleAPI,
        _ method: String,
        _ pathAndQuery: String,
        headers: [(String, String)] = [],
        body: HTTPClientRequest.Body? = nil,
        timeoutSeconds: Int64 = 10
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(api.port)\(pathAndQuery)")
        request.method = .init(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = body
        let response = try await ConciergeTestRig.client.execute(request, timeout: .seconds(timeoutSeconds))
        let bytes = try await response.body.collect(upTo: 64 * 1024 * 1024)
        var headerMap: [String: String] = [:]
        for header in response.headers { headerMap[header.name.lowercased()] = header.value }
        return Reply(status: Int(response.status.code), headers: headerMap, body: Array(bytes.readableBytesView))
    }

    func form(_ text: String) -> HTTPClientRequest.Body { .bytes(Array(text.utf8)) }

    let formHeader = [("Content-Type", "application/x-www-form-urlencoded")]

    func login(_ api: RunningSampleAPI, user: String = "alice") async throws -> (access: String, refresh: String) {
        let reply = try await send(api, "POST", "/api/login", headers: formHeader, body: form("username=\(user)&password=pw"))
        #expect(reply.code == 200)
        #expect(reply.result["userId"] as? String == user)
        let access = try #require(reply.result["accessToken"] as? String)
        let refresh = try #require(reply.result["refreshToken"] as? String)
        return (access, refresh)
    }

    @Test func loginThenUserInfoWithTokenInQueryHeaderOrMissing() async throws {
        try await withSampleAPI { api in
            let bad = try await send(api, "POST", "/api/login", headers: formHeader, body: form("username=alice&password="))
            #expect(bad.code == 1001)
            #expect(bad.json["msg"] as? String == "bad credentials")

            let tokens = try await login(api)
            #expect(tokens.access.hasPrefix("at-") && tokens.refresh.hasPrefix("rt-"))

            let viaQuery = try await send(api, "GET", "/api/user/info?accessToken=\(tokens.access)")
            #expect(viaQuery.status == 200)
            #expect(viaQuery.headers["content-type"] == "application/json")
            #expect(viaQuery.code == 200)
            #expect(viaQuery.result["userId"] as? String == "alice")

            let viaHeader = try await send(
                api, "GET", "/api/user/info", headers: [("Authorization", "Bearer \(tokens.access)")])
            #expect(viaHeader.code == 200)

            let missing = try await send(api, "GET", "/api/user/info")
            #expect(missing.code == 800)

            #expect(api.state.calls("/api/user/info") == 3)
            #expect(api.state.calls("/api/login") == 2)
            let last = try #require(api.state.lastRequest("/api/user/info"))
            #expect(last.method == "GET")
            #expect(last.query.isEmpty)
            let firstLogin = try #require(api.state.lastRequest("/api/login"))
            #expect(firstLogin.body == "username=alice&password=pw")
            #expect(firstLogin.headers["content-type"] == "application/x-www-form-urlencoded")
        }
    }

    @Test func expiredTokenIsRefreshedAndRotated() async throws {
        try await withSampleAPI { api in
            let tokens = try await login(api)
            api.state.expireAllAccessTokens()
            let expired = try await send(api, "GET", "/api/user/info?accessToken=\(tokens.access)")
            #expect(expired.code == 801)

            let refreshed = try await send(
                api, "POST", "/api/token/refresh", headers: [("Content-Type", "application/json")],
                body: .bytes(Array(#"{"refreshToken": "\#(tokens.refresh)"}"#.utf8)))
            #expect(refreshed.code == 200)
            let newAccess = try #require(refreshed.result["accessToken"] as? String)
            let newRefresh = try #require(refreshed.result["refreshToken"] as? String)
            #expect(newAccess != tokens.access && newRefresh != tokens.refresh)

            let works = try await send(api, "GET", "/api/user/info?accessToken=\(newAccess)")
            #expect(works.code == 200)

            let reused = try await send(
                api, "POST", "/api/token/refresh", headers: formHeader, body: form("refreshToken=\(tokens.refresh)"))
            #expect(reused.code == 810)
            #expect(api.state.refreshCalls == 2)

            api.state.revokeAllSessions()
            let revoked = try await send(api, "GET", "/api/user/info?accessToken=\(newAccess)")
            #expect(revoked.code == 802)
            let refreshRevoked = try await send(
                api, "POST", "/api/token/refresh", headers: formHeader, body: form("refreshToken=\(newRefresh)"))
            #expect(refreshRevoked.code == 810)
        }
    }

    @Test func accessTokenExpiresAfterTTL() async throws {
        // A TTL far beyond what a loaded machine takes between the login and the first request
        // (2 s was once outlasted while the suite and a fuzzer shared both cores); the clock is
        // moved past it.
        try await withSampleAPI(.init(accessTokenTTL: .seconds(120))) { api in
            let tokens = try await login(api)
            #expect(try await send(api, "GET", "/api/user/info?accessToken=\(tokens.access)").code == 200)
            api.state.advanceClock(by: .seconds(121))
            #expect(try await send(api, "GET", "/api/user/info?accessToken=\(tokens.access)").code == 801)
        }
    }

    @Test func rangedDownloadServesTheRightBytes() async throws {
        try await withSampleAPI { api in
            let size = 200_000
            let whole = try await send(api, "GET", "/api/download/file.bin?size=\(size)")
            #expect(whole.status == 200)
            #expect(whole.headers["accept-ranges"] == "bytes")
            #expect(whole.body == (0..<size).map { UInt8($0 % 251) })

            let middle = try await send(
                api, "GET", "/api/download/file.bin?size=\(size)", headers: [("Range", "bytes=70000-70009")])
            #expect(middle.status == 206)
            #expect(middle.headers["content-range"] == "bytes 70000-70009/\(size)")
            #expect(middle.body == (70000...70009).map { UInt8($0 % 251) })

            let suffix = try await send(api, "GET", "/api/download/file.bin?size=\(size)", headers: [("Range", "bytes=-5")])
            #expect(suffix.status == 206)
            #expect(suffix.body == ((size - 5)..<size).map { UInt8($0 % 251) })

            let outside = try await send(
                api, "GET", "/api/download/file.bin?size=\(size)", headers: [("Range", "bytes=\(size)-")])
            #expect(outside.status == 416)
            #expect(outside.headers["content-range"] == "bytes */\(size)")
        }
    }

    @Test func uploadIsHashedWhileStreaming() async throws {
        try await withSampleAPI { api in
            let payload = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            let reply = try await send(api, "POST", "/api/upload", body: .bytes(payload, length: .unknown))
            #expect(reply.code == 200)
            #expect(reply.data["size"] as? Int == payload.count)
            let expected = SHA256.hash(data: payload).map { String(format: "%02x", $0) }.joined()
            #expect(reply.data["sha256"] as? String == expected)
        }
    }

    @Test func signedRequestsAreVerified() async throws {
        let secret = "s3cret"
        try await withSampleAPI(.init(signingSecret: secret)) { api in
            // Canonical string: RFC 3986-encoded pairs sorted by name then value, `signature` left out.
            let canonical = "a=1&a=2&nonce=n%201&timestamp=1700000000"
            let mac = HMAC<SHA256>.authenticationCode(for: Array(canonical.utf8), using: SymmetricKey(data: Array(secret.utf8)))
            let hex = mac.map { String(format: "%02x", $0) }.joined()
            let query = "timestamp=1700000000&a=2&nonce=n%201&a=1"

            let good = try await send(api, "GET", "/api/signed?\(query)&signature=\(hex)")
            #expect(good.code == 200)
            #expect(good.data["algorithm"] as? String == "hmac-sha256")
            #expect(good.data["encoding"] as? String == "hex")

            let bad = try await send(api, "GET", "/api/signed?\(query)&signature=deadbeef")
            #expect(bad.code == 1003)
            #expect(bad.json["msg"] as? String == "bad signature: expected over \(canonical)")
        }
    }

    @Test func shutdownStopsListening() async throws {
        let api = try await SampleAPI.start()
        #expect(try await send(api, "GET", "/api/items?limit=2").data["total"] as? Int == 1000)
        await api.shutdown()
        // The port now refuses connections (AsyncHTTPClient retries until its deadline).
        await #expect(throws: (any Error).self) {
            _ = try await send(api, "GET", "/api/items", timeoutSeconds: 1)
        }
    }
}
