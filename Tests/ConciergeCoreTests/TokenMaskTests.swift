@testable import ConciergeCore
import Testing

@Suite("TokenMask")
struct TokenMaskTests {
    @Test("maskQuery masks only the named params and keeps everything else byte for byte")
    func maskOnlyNamed() {
        let masked = TokenMask.maskQuery("/api/items?accessToken=s3cr3t&limit=10&token=other", names: ["accessToken"])
        #expect(masked == "/api/items?accessToken=***&limit=10&token=other")
    }

    @Test("maskQuery masks every occurrence and names written percent-encoded")
    func maskEncodedAndRepeated() {
        let masked = TokenMask.maskQuery("/x?access%54oken=a&accessToken=b&q=a%20b", names: ["accessToken"])
        #expect(masked == "/x?access%54oken=***&accessToken=***&q=a%20b")
    }

    @Test("maskQuery does not mask names that merely contain a token name")
    func maskExactNames() {
        #expect(TokenMask.maskQuery("/x?accessTokenX=a&xaccessToken=b", names: ["accessToken"]) == "/x?accessTokenX=a&xaccessToken=b")
    }

    @Test("maskQuery leaves a target without a query, without names, or pieces without '=' alone")
    func maskNoOp() {
        #expect(TokenMask.maskQuery("/api/items", names: ["accessToken"]) == "/api/items")
        #expect(TokenMask.maskQuery("/api/items?accessToken=x", names: []) == "/api/items?accessToken=x")
        #expect(TokenMask.maskQuery("/x?accessToken&a=1", names: ["accessToken"]) == "/x?accessToken&a=1")
        #expect(TokenMask.maskQuery("/x?a=1&&b=2", names: ["a"]) == "/x?a=***&&b=2")
    }

    @Test("mask shows a short prefix and the length, or *** for short secrets")
    func mask() {
        #expect(TokenMask.mask("abcdefghijklmnop") == "abcd…(16)")
        #expect(TokenMask.mask("short") == "***")
        #expect(TokenMask.mask("12345678") == "***")
        #expect(!TokenMask.mask("eyJhbGciOiJIUzI1NiJ9.payload").contains("payload"))
    }

    @Test("scrub replaces every occurrence of each secret of 4+ characters")
    func scrub() {
        let text = "token=abcdefghijkl and again abcdefghijkl; pin=123"
        #expect(TokenMask.scrub(text, secrets: ["abcdefghijkl", "123"]) == "token=abcd…(12) and again abcd…(12); pin=123")
    }
}

@Suite("SessionTokens")
struct SessionTokensTests {
    @Test("cacheUser is the user id when present, else a digest of the token that does not contain it")
    func cacheUser() {
        #expect(SessionTokens(accessToken: "tok", refreshToken: nil, userID: "42").cacheUser == "42")
        let anonymous = SessionTokens(accessToken: "secret-access-token", refreshToken: nil, userID: nil).cacheUser
        #expect(anonymous.hasPrefix("session-"))
        #expect(anonymous.count == "session-".count + 16)
        #expect(!anonymous.contains("secret"))
        #expect(SessionTokens(accessToken: "secret-access-token", refreshToken: nil, userID: "").cacheUser == anonymous)
        #expect(SessionTokens(accessToken: "other-token", refreshToken: nil, userID: nil).cacheUser != anonymous)
    }

    @Test("LoginGuard admits login: required only with a session")
    func loginGuard() {
        var required = EndpointPolicy.passThrough
        required.login = .required
        var optional = EndpointPolicy.passThrough
        optional.login = .optional
        let session = SessionTokens(accessToken: "t", refreshToken: nil, userID: "1")
        #expect(!LoginGuard().admits(required, session: nil))
        #expect(LoginGuard().admits(required, session: session))
        #expect(LoginGuard().admits(optional, session: nil))
        #expect(LoginGuard().admits(.passThrough, session: nil))
    }
}
