import NIOCore
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// How an upstream URL splits into the pool's origin and the request target.
@Suite("Upstream origin")
struct UpstreamOriginTests {
    @Test("scheme, host, port and target; the default port per scheme; the scheme in any case")
    func splits() throws {
        let (plain, target) = try #require(UpstreamOrigin.parse("http://api.example.com:8080/v1/items?limit=1&b=2"))
        #expect(!plain.isTLS && plain.host == "api.example.com" && plain.port == 8080 && plain.authority == "api.example.com:8080")
        #expect(target == "/v1/items?limit=1&b=2")
        let (secure, root) = try #require(UpstreamOrigin.parse("HTTPS://Example.com", caFile: "/ca.pem"))
        #expect(secure.isTLS && secure.port == 443 && secure.host == "Example.com" && secure.caFile == "/ca.pem")
        #expect(root == "/")
        #expect(try #require(UpstreamOrigin.parse("http://h/x", caFile: "/ca.pem")).origin.caFile == nil, "a CA file is for https only")
        #expect(try #require(UpstreamOrigin.parse("http://h")).origin.port == 80)
    }

    @Test("a query with no path gets a leading slash; a fragment is not sent")
    func target() throws {
        #expect(try #require(UpstreamOrigin.parse("http://h?q=1")).target == "/?q=1")
        #expect(try #require(UpstreamOrigin.parse("http://h/p?q=1#frag")).target == "/p?q=1")
        #expect(try #require(UpstreamOrigin.parse("http://h#frag")).target == "/")
    }

    @Test("IPv6 literals: brackets off the host, kept in the authority; an address is not a server name")
    func ipv6() throws {
        let (origin, _) = try #require(UpstreamOrigin.parse("https://[::1]:8443/x"))
        #expect(origin.host == "::1" && origin.port == 8443 && origin.authority == "[::1]:8443")
        #expect(origin.serverName == nil)
        #expect(try #require(UpstreamOrigin.parse("https://[::1]/x")).origin.port == 443)
        #expect(try #require(UpstreamOrigin.parse("https://10.0.0.2/x")).origin.serverName == nil)
        #expect(try #require(UpstreamOrigin.parse("https://api.example.com/x")).origin.serverName == "api.example.com")
    }

    @Test("refused: other schemes, user info, an empty host, bad ports, an unclosed bracket")
    func refused() {
        for url in ["ftp://h/x", "http:/h/x", "httpx://h", "//h/x", "http://user:pw@h/x", "http:///x", "http://h:0/",
                    "http://h:65536/", "http://h:port/", "http://[::1/x", "http://[::1]x/", "http://:80/"] {
            #expect(UpstreamOrigin.parse(url) == nil, "\(url)")
        }
        #expect(UpstreamOrigin.schemeIsTLS("HtTpS://h") == true)
        #expect(UpstreamOrigin.schemeIsTLS("http://h") == false)
        #expect(UpstreamOrigin.schemeIsTLS("https:/h") == nil)
    }

    @Test("the request sent: Host first when absent, the caller's framing replaced by the body's, one buffer")
    func wireRequest() throws {
        let (origin, _) = try #require(UpstreamOrigin.parse("http://h:81/x"))
        let post = try UpstreamWireRequest.encode(method: "POST", target: "/x?a=1", authority: origin.authority,
                                                  headers: ["Accept": "application/json", "CONTENT-LENGTH": "99", "Transfer-Encoding": "chunked"],
                                                  body: ByteBuffer(string: "hello"))
        #expect(String(buffer: post.bytes) == "POST /x?a=1 HTTP/1.1\r\nHost: h:81\r\nAccept: application/json\r\nContent-Length: 5\r\n\r\nhello")
        #expect(post.method == .POST && post.target == "/x?a=1" && !post.closeAfter && !post.isIdempotent)
        let get = try UpstreamWireRequest.encode(method: "GET", target: "/x", authority: origin.authority,
                                                 headers: ["host": "other", "Connection": "keep-alive, Close"], body: nil)
        #expect(String(buffer: get.bytes) == "GET /x HTTP/1.1\r\nhost: other\r\nConnection: keep-alive, Close\r\n\r\n",
                "a GET without a body has no Content-Length; the caller's Host stays")
        #expect(get.closeAfter && get.isIdempotent)
        let put = try UpstreamWireRequest.encode(method: "PUT", target: "/x", authority: origin.authority, headers: [:], body: ByteBuffer())
        #expect(String(buffer: put.bytes) == "PUT /x HTTP/1.1\r\nHost: h:81\r\nContent-Length: 0\r\n\r\n")
    }

    @Test("a request whose fields could split it or add a field is not encoded")
    func wireRequestRefusesControlCharacters() {
        let refused: [(method: String, target: String, headers: HTTPHeaders)] = [
            ("GET", "/x", ["Authorization": "Bearer abc\r\nX-Admin: 1"]),
            ("GET", "/x", ["X-Token": "abc\ndef"]),
            ("GET", "/x", ["X-Token": "abc\u{0}"]),
            ("GET", "/x", ["X Bad": "1"]),
            ("GET", "/x", ["X-Bad:": "1"]),
            ("GET", "/x y", [:]),
            ("GET", "/x\r\nX-Admin: 1", [:]),
            ("GE T", "/x", [:]),
        ]
        for (method, target, headers) in refused {
            #expect(throws: UpstreamWireRequest.Invalid.self, "\(method) \(target) \(headers)") {
                try UpstreamWireRequest.encode(method: method, target: target, authority: "h", headers: headers, body: nil)
            }
        }
        #expect(throws: Never.self) {
            try UpstreamWireRequest.encode(method: "GET", target: "/x", authority: "h", headers: ["X-Tab": "a\tb", "X-Utf8": "caf\u{e9}"], body: nil)
        }
    }

    @Test("the per-thread memo splits every URL as the full parse does, across origins and CA files")
    func memoMatchesParse() {
        let memo = UpstreamOrigin.Memo()
        let urls = ["http://127.0.0.1:8080/a?x=1", "http://127.0.0.1:8080/b", "http://127.0.0.1:80801/c", "http://127.0.0.1:8080",
                    "http://127.0.0.1:8080?q=1", "http://127.0.0.1:8080/d#frag", "http://127.0.0.1:8080@evil/e", "HTTP://127.0.0.1:8080/f",
                    "https://api.example.com/g", "https://api.example.com/h", "http://[::1]:9/i", "http://[::1]:9/j", "ftp://h/x"]
        for caFile in [nil, "/etc/ca.pem", "/etc/other.pem"] {
            for url in urls + urls.reversed() {
                let full = UpstreamOrigin.parse(url, caFile: caFile)
                let remembered = memo.parse(url, caFile: caFile)
                #expect(remembered?.origin == full?.origin && remembered?.target == full?.target, "\(url) \(caFile ?? "-")")
            }
        }
    }

    @Test("a base URL and a target apart split as the joined URL does, with or without a path prefix")
    func memoOfBaseAndTarget() {
        let memo = UpstreamOrigin.Memo()
        let bases = ["http://127.0.0.1:8080", "http://127.0.0.1:8080/v1", "http://127.0.0.1:8081", "HTTP://127.0.0.1:8080",
                     "https://api.example.com/api", "http://127.0.0.1:8080@evil", "ftp://h", "http://127.0.0.1:8080/v1#x"]
        let targets = ["/a?x=1", "/b", "", "?q=1", "/d#frag", "x", "/"]
        for caFile in [nil, "/etc/ca.pem"] {
            for base in bases + bases.reversed() {
                for target in targets {
                    let full = UpstreamOrigin.parse(base + target, caFile: caFile)
                    let apart = memo.parse(base: base, target: target, caFile: caFile)
                    #expect(apart?.origin == full?.origin && apart?.target == full?.target, "\(base) \(target) \(caFile ?? "-")")
                }
            }
        }
        #expect(UpstreamRequest(method: "GET", base: "http://h:1/v1", target: "/a?b=1", headers: [:], body: .none, timeout: .seconds(1)).url
            == "http://h:1/v1/a?b=1")
        #expect(UpstreamRequest(method: "GET", url: "http://h:1/a", headers: [:], body: .none, timeout: .seconds(1)).url == "http://h:1/a")
    }
}
