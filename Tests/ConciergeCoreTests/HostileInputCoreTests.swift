import ConciergeCore
import ConciergeFuzzing
import Foundation
import Testing

@Suite("HTTP field syntax")
struct HTTPFieldSyntaxTests {
    @Test("tokens: RFC 9110 tchar only")
    func tokens() {
        #expect(HTTPFieldSyntax.isToken("X-Requested-With"))
        #expect(HTTPFieldSyntax.isToken("M-SEARCH"))
        #expect(HTTPFieldSyntax.isToken("a_b.c~d!"))
        #expect(!HTTPFieldSyntax.isToken(""))
        #expect(!HTTPFieldSyntax.isToken("\u{e9}"))
        #expect(!HTTPFieldSyntax.isToken("🚀"))
        #expect(!HTTPFieldSyntax.isToken("X A"))
        #expect(!HTTPFieldSyntax.isToken("X:A"))
    }

    @Test("field values: no control bytes, no surrounding white space")
    func fieldValues() {
        #expect(HTTPFieldSyntax.isFieldValue(""))
        #expect(HTTPFieldSyntax.isFieldValue("Bearer abc.def"))
        #expect(HTTPFieldSyntax.isFieldValue("a\tb"))
        #expect(HTTPFieldSyntax.isFieldValue("caf\u{e9}"))
        #expect(!HTTPFieldSyntax.isFieldValue("1\r\nX-Injected: 2"))
        #expect(!HTTPFieldSyntax.isFieldValue("a\u{0}b"))
        #expect(!HTTPFieldSyntax.isFieldValue(" a"))
        #expect(!HTTPFieldSyntax.isFieldValue("a "))
        #expect(HTTPFieldSyntax.problem(name: "\u{e9}", value: "1")?.contains("invalid header name") == true)
        #expect(HTTPFieldSyntax.problem(name: "X", value: "1") == nil)
    }
}

@Suite("Transfer codings")
struct TransferCodingTests {
    @Test("only exactly chunked is accepted; anything else is unsupported")
    func classify() {
        #expect(TransferCoding.of([]) == .none)
        #expect(TransferCoding.of(["chunked"]) == .chunked)
        #expect(TransferCoding.of(["Chunked "]) == .chunked)
        #expect(TransferCoding.of(["gzip, chunked"]) == .unsupported("gzip, chunked"))
        #expect(TransferCoding.of(["identity", "chunked"]) == .unsupported("identity, chunked"))
        #expect(TransferCoding.of(["xchunked"]) == .unsupported("xchunked"))
        #expect(TransferCoding.of(["chunked, chunked"]) == .unsupported("chunked, chunked"))
    }
}

@Suite("Host policy")
struct HostPolicyTests {
    let policy = HostPolicy(listenerHosts: ["127.0.0.1", "0.0.0.0"], allowedHosts: ["app.local", ".corp.example"],
                            upstreamHosts: ["api.example.com"])

    @Test("own, loopback, allowed and upstream names pass, with or without a port")
    func allowed() {
        for host in ["127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:8080", "app.local", "api.example.com:443",
                     "x.corp.example", "corp.example"] {
            #expect(policy.verdict(hostFields: [host], requiresHost: true) == .allowed, "\(host)")
        }
    }

    @Test("foreign names are forbidden; a wildcard bind address is not a name")
    func forbidden() {
        #expect(policy.verdict(hostFields: ["evil.example.com:8080"], requiresHost: true) == .forbidden("evil.example.com"))
        #expect(policy.verdict(hostFields: ["0.0.0.0:8080"], requiresHost: true) == .forbidden("0.0.0.0"))
        #expect(policy.verdict(hostFields: ["xcorp.example"], requiresHost: true) == .forbidden("xcorp.example"))
    }

    @Test("missing, duplicate or malformed Host is malformed (400)")
    func malformed() {
        #expect(policy.verdict(hostFields: [], requiresHost: true) == .malformed("missing Host header"))
        #expect(policy.verdict(hostFields: [], requiresHost: false) == .allowed)
        #expect(policy.verdict(hostFields: ["a", "b"], requiresHost: true) == .malformed("more than one Host header"))
        for bad in ["", "a b", "a:b", "[zz]", "a/b", "a:123456789"] {
            #expect(policy.verdict(hostFields: [bad], requiresHost: true) == .malformed("invalid Host header"), "\(bad)")
        }
    }
}

@Suite("Secret redactor")
struct SecretRedactorTests {
    let redactor = SecretRedactor(extraNames: ["accessToken"])

    @Test("credential fields are masked in forms, queries and JSON at any depth")
    func masks() {
        #expect(redactor.redactForm("username=alice&password=pw&client_secret=s") == "username=alice&password=***&client_secret=***")
        #expect(redactor.redactTarget("/a?accessToken=t&x=1") == "/a?accessToken=***&x=1")
        let json = JSONValue.parse(#"{"requests":[{"headers":{"Authorization":"Bearer t"},"body":{"appSecret":"s","keep":"k"}}]}"#)!
        let text = redactor.redactJSON(json).serialized
        #expect(!text.contains("Bearer t"))
        #expect(!text.contains("\"s\""))
        #expect(text.contains("\"keep\":\"k\""))
        #expect(redactor.redactBody(Array("\u{0}\u{1}binary".utf8), contentType: "application/octet-stream") == "<8 bytes>")
    }

    @Test("literal secrets are scrubbed from any text")
    func scrub() {
        #expect(SecretRedactor.scrub("token abcdef in line", literals: ["abcdef", "ab"]) == "token *** in line")
    }
}

@Suite("Batch and chain bodies")
struct SubRequestListTests {
    @Test("a non-ASCII header name or a CR LF value is refused with the place named")
    func badHeaders() throws {
        #expect(throws: SubRequestError.self) {
            try SubRequestList.parse(Array(#"{"requests":[{"id":"a","path":"/x","headers":{"\u00e9":"1"}}]}"#.utf8), listKey: "requests")
        }
        let list = try SubRequestList.parse(Array(#"{"requests":[{"id":"a","path":"/x","headers":{"X":"1\r\n2"}}]}"#.utf8), listKey: "requests")
        #expect(throws: SubRequestError.self) { try list.requests[0].literalHeaders() }
    }

    @Test("methods are tokens (M-SEARCH allowed), an empty template is refused, not a trap")
    func methodsAndTemplates() throws {
        let list = try SubRequestList.parse(Array(#"{"steps":[{"id":"a","method":"m-search","path":"/x"},{"id":"b","path":"/{{}}"}]}"#.utf8), listKey: "steps")
        #expect(list.requests[0].method == "M-SEARCH")
        #expect(throws: SubRequestError.self) { try ChainTemplate.checkReferences(list.requests) }
        #expect(throws: SubRequestError.self) { try ChainTemplate.resolve(list.requests[1], [:]) }
    }

    @Test("a path with a space or control character is refused, literal or templated (found by fuzzing)")
    func pathsAreOriginForm() throws {
        #expect(throws: SubRequestError.self) {
            try SubRequestList.parse(Array(#"{"requests":[{"id":"a","path":"/x\r\nHost: evil"}]}"#.utf8), listKey: "requests")
        }
        #expect(throws: SubRequestError.self) {
            try SubRequestList.parse(Array(#"{"requests":[{"id":"a","path":"/x y"}]}"#.utf8), listKey: "requests")
        }
        let list = try SubRequestList.parse(Array(#"{"steps":[{"id":"a","path":"/x"},{"id":"b","path":"/y?q={{a.v}}"}]}"#.utf8), listKey: "steps")
        // Templated text is percent-encoded in paths, so it stays a valid target.
        #expect(try ChainTemplate.resolve(list.requests[1], ["a": ["v": "1 \r\n2"]]).path == "/y?q=1%20%0D%0A2")
    }

    @Test("a template resolving to CR LF in a header is refused")
    func templatedControlCharacters() throws {
        let list = try SubRequestList.parse(Array(#"{"steps":[{"id":"a","path":"/x"},{"id":"b","path":"/y","headers":{"X":"{{a.v}}"}}]}"#.utf8), listKey: "steps")
        #expect(throws: SubRequestError.self) { try ChainTemplate.resolve(list.requests[1], ["a": ["v": "1\r\n2"]]) }
        let ok = try ChainTemplate.resolve(list.requests[1], ["a": ["v": "fine"]])
        #expect(ok.headers.first?.1 == "fine")
    }
}

@Suite("Fuzz targets")
struct FuzzCorpusTests {
    static var corpus: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fuzz/corpus").path
    }

    @Test("every seed of every fuzz target runs without a trap")
    func seedsReplay() throws {
        for name in FuzzTargets.names {
            let target = try #require(FuzzTargets.named(name))
            #expect(FuzzTargets.replay([Self.corpus + "/" + name], through: target) >= 3, "\(name)")
        }
    }
}
