@testable import ConciergeCore
import Foundation
import Testing

/// Expected signatures are fixed test vectors computed outside Swift, e.g.
/// `python3 -c 'import hmac,hashlib;print(hmac.new(b"key",b"a=1&b=2",hashlib.sha256).hexdigest())'`.
@Suite("RequestSigner")
struct RequestSignerTests {
    private func signer(secret: String = "key", _ algorithm: SigningConfig.Algorithm = .hmacSHA256,
                        _ encoding: SigningConfig.Encoding = .hex, param: String = "signature",
                        timestampParam: String? = "timestamp", nonceParam: String? = "nonce") -> RequestSigner {
        RequestSigner(config: SigningConfig(secret: secret, algorithm: algorithm, encoding: encoding, param: param,
                                            timestampParam: timestampParam, nonceParam: nonceParam))
    }

    private let now = Date(timeIntervalSince1970: 1_700_000_000.75)

    // MARK: Canonical string

    @Test("the canonical string sorts params by name then value and joins them as k=v&k=v")
    func canonicalSorted() {
        #expect(signer().canonicalString([Param("b", "2"), Param("a", "1")]) == "a=1&b=2")
        #expect(signer().canonicalString([Param("a", "2"), Param("a", "1")]) == "a=1&a=2")
    }

    @Test("the canonical string leaves out the signature param, whatever it is called")
    func canonicalExcludesSignature() {
        #expect(signer().canonicalString([Param("b", "2"), Param("signature", "old"), Param("a", "1")]) == "a=1&b=2")
        let custom = signer(param: "sig")
        #expect(custom.canonicalString([Param("sig", "x"), Param("signature", "y")]) == "signature=y")
    }

    @Test("the canonical string percent-encodes like the cache key (space %20, é %C3%A9, ~ kept)")
    func canonicalEncoded() {
        let s = signer().canonicalString([Param("q", "hello world"), Param("name", "José"), Param("t", "a~b+c")])
        #expect(s == "name=Jos%C3%A9&q=hello%20world&t=a~b%2Bc")
        let params = [Param("q", "hello world"), Param("name", "José")]
        #expect(signer().canonicalString(params) == QueryString.canonical(params))
    }

    // MARK: Known vectors over "a=1&b=2" with secret "key"

    @Test("hmac-sha256 hex of 'a=1&b=2' with key 'key' matches the known vector")
    func hmacSHA256Hex() {
        #expect(signer(.hmacSHA256, .hex).signature(of: "a=1&b=2") == "b3c18626e7ac81395c1d37966c7ee2258a6967a1b3fdefb4fa339bb19dc73b0e")
    }

    @Test("hmac-sha256 base64 matches the known vector")
    func hmacSHA256Base64() {
        #expect(signer(.hmacSHA256, .base64).signature(of: "a=1&b=2") == "s8GGJuesgTlcHTeWbH7iJYppZ6Gz/e+0+jObsZ3HOw4=")
    }

    @Test("hmac-sha256 matches RFC 4231 test case 2 (key 'Jefe')")
    func hmacSHA256RFC4231() {
        #expect(signer(secret: "Jefe").signature(of: "what do ya want for nothing?")
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test("hmac-sha1 hex and base64 match the known vectors")
    func hmacSHA1() {
        #expect(signer(.hmacSHA1, .hex).signature(of: "a=1&b=2") == "8465655f0f164a36a4fb8ad0e83c6c0fe336c0b0")
        #expect(signer(.hmacSHA1, .base64).signature(of: "a=1&b=2") == "hGVlXw8WSjak+4rQ6DxsD+M2wLA=")
    }

    @Test("md5-salted is MD5(string + secret), hex and base64")
    func md5Salted() {
        #expect(signer(.md5Salted, .hex).signature(of: "a=1&b=2") == "1c123a5dc12e90deeaa1cd94681f0d88")
        #expect(signer(.md5Salted, .base64).signature(of: "a=1&b=2") == "HBI6XcEukN7qoc2UaB8NiA==")
    }

    @Test("hex signatures are lower-case with two digits per byte")
    func hexFormat() {
        for algorithm in SigningConfig.Algorithm.allCases {
            let sig = signer(algorithm, .hex).signature(of: "x")
            #expect(sig.allSatisfy { "0123456789abcdef".contains($0) })
            let expectedLength = algorithm == .hmacSHA256 ? 64 : algorithm == .hmacSHA1 ? 40 : 32
            #expect(sig.count == expectedLength)
        }
    }

    @Test("a different secret gives a different signature")
    func secretMatters() {
        #expect(signer(secret: "key").signature(of: "a=1") != signer(secret: "key2").signature(of: "a=1"))
    }

    // MARK: sign(_:now:nonce:)

    @Test("GET: timestamp (Unix seconds), nonce and signature go in the query; the string signed includes them")
    func signGet() {
        var request = ProxyRequest(method: "GET", target: "/api/items?b=2&a=1")
        let string = signer(secret: "s3cret").sign(&request, now: now, nonce: "n1")
        #expect(string == "a=1&b=2&nonce=n1&timestamp=1700000000")
        #expect(request.query.first { $0.name == "timestamp" }?.value == "1700000000")
        #expect(request.query.first { $0.name == "nonce" }?.value == "n1")
        // python3: hmac.new(b"s3cret", b"a=1&b=2&nonce=n1&timestamp=1700000000", hashlib.sha256).hexdigest()
        #expect(request.query.first { $0.name == "signature" }?.value == "7922650ccc7eb351e33a15cd5b47238b30b098618eca878ff3b184218137e467")
        #expect(request.query.count == 5)
        if case .empty = request.body {} else { Issue.record("a GET body must stay empty") }
    }

    @Test("GET: a timestamp, nonce or signature the client sent is replaced, not duplicated")
    func signReplacesClientValues() {
        var request = ProxyRequest(method: "GET", target: "/x?a=1&timestamp=1&nonce=old&signature=forged")
        let string = signer(secret: "s3cret").sign(&request, now: now, nonce: "n1")
        #expect(string == "a=1&nonce=n1&timestamp=1700000000")
        #expect(request.query.filter { $0.name == "timestamp" }.count == 1)
        #expect(request.query.filter { $0.name == "nonce" }.count == 1)
        #expect(request.query.filter { $0.name == "signature" }.count == 1)
        #expect(request.query.first { $0.name == "signature" }?.value != "forged")
    }

    @Test("POST form: the params go in the body, encoded in the string signed")
    func signPostForm() {
        var request = ProxyRequest(method: "POST", path: "/api/update",
                                   body: .form([Param("name", "Jürgen X"), Param("token", "t0k")], original: []))
        let string = signer(secret: "s3cret").sign(&request, now: now, nonce: "abc")
        #expect(string == "name=J%C3%BCrgen%20X&nonce=abc&timestamp=1700000000&token=t0k")
        #expect(request.query.isEmpty)
        #expect(request.body.value(of: "timestamp") == "1700000000")
        #expect(request.body.value(of: "nonce") == "abc")
        #expect(request.body.value(of: "signature") == "e7f7da970d1a9b943ebae49b514919916f538027f507de1c3841ccd2097d487a")
    }

    @Test("POST JSON: timestamp, nonce and signature become top-level string members")
    func signPostJSON() throws {
        let json = Array(#"{"b":2,"a":"x"}"#.utf8)
        var request = ProxyRequest(method: "POST", path: "/api/items", body: RequestBody.parse(json, contentType: "application/json"))
        let string = signer(secret: "key").sign(&request, now: now, nonce: "n")
        #expect(string == "a=x&b=2&nonce=n&timestamp=1700000000")
        guard case .json(let object) = request.body, case .object(let members)? = JSONValue.parse(object.bytes) else {
            Issue.record("body should still be JSON")
            return
        }
        #expect(members["timestamp"] == "1700000000")
        #expect(members["nonce"] == "n")
        #expect(members["signature"] == .string(signer(secret: "key").signature(of: string)))
        #expect(members["b"] == 2)
        #expect(request.query.isEmpty)
    }

    @Test("POST: query params are signed together with the body params")
    func signPostWithQuery() {
        var request = ProxyRequest(method: "POST", target: "/api/items?q=1", body: .form([Param("a", "2")], original: []))
        let string = signer(timestampParam: nil, nonceParam: nil).sign(&request, now: now, nonce: "n")
        #expect(string == "a=2&q=1")
        #expect(request.body.value(of: "signature") == signer().signature(of: "a=2&q=1"))
        #expect(request.query == [Param("q", "1")])
    }

    @Test("POST with an empty body gets a form body holding the params")
    func signPostEmptyBody() {
        var request = ProxyRequest(method: "POST", path: "/api/ping")
        let string = signer().sign(&request, now: now, nonce: "n")
        #expect(string == "nonce=n&timestamp=1700000000")
        #expect(request.body.contentType == "application/x-www-form-urlencoded")
        #expect(request.body.value(of: "signature") == signer().signature(of: string))
    }

    @Test("without timestamp and nonce params only the signature is added")
    func signatureOnly() {
        var request = ProxyRequest(method: "GET", target: "/x?a=1&b=2")
        let string = signer(param: "sig", timestampParam: nil, nonceParam: nil).sign(&request, now: now, nonce: "n")
        #expect(string == "a=1&b=2")
        #expect(request.query.map(\.name) == ["a", "b", "sig"])
        #expect(request.query.last?.value == "b3c18626e7ac81395c1d37966c7ee2258a6967a1b3fdefb4fa339bb19dc73b0e")
    }

    @Test("the default nonce is a fresh lower-case UUID")
    func defaultNonce() {
        var r1 = ProxyRequest(method: "GET", path: "/x")
        var r2 = ProxyRequest(method: "GET", path: "/x")
        signer().sign(&r1, now: now)
        signer().sign(&r2, now: now)
        let n1 = r1.query.first { $0.name == "nonce" }?.value ?? ""
        let n2 = r2.query.first { $0.name == "nonce" }?.value ?? ""
        #expect(UUID(uuidString: n1) != nil)
        #expect(n1 == n1.lowercased())
        #expect(n1 != n2)
    }
}
