@testable import ConciergeCore
import Testing

@Suite("EnvelopeReader")
struct EnvelopeReaderTests {
    private func reader(codePath: String = "code", messagePath: String = "msg", success: Set<Int> = [200],
                        refresh: Set<Int> = [801], logout: Set<Int> = [802]) -> EnvelopeReader {
        EnvelopeReader(envelope: ConciergeConfig.Envelope(
            codePath: codePath, messagePath: messagePath, successCodes: success, refreshCodes: refresh, logoutCodes: logout,
            unavailable: CannedReply(status: 502, body: ["code": -1]), invalid: CannedReply(status: 502, body: ["code": -2]),
            warningCodes: [:]))
    }

    private func classify(_ json: String, _ reader: EnvelopeReader? = nil) -> EnvelopeReader.Outcome {
        (reader ?? self.reader()).classify(JSONValue.parse(json))
    }

    @Test("a success code is a logical success")
    func success() {
        #expect(classify(#"{"code":200,"msg":"ok","data":{}}"#) == .success(code: 200))
    }

    @Test("a refresh code asks for a token refresh")
    func refresh() {
        #expect(classify(#"{"code":801,"msg":"token expired"}"#) == .refresh(code: 801))
    }

    @Test("a logout code drops the session")
    func logout() {
        #expect(classify(#"{"code":802,"msg":"logged out elsewhere"}"#) == .logout(code: 802))
    }

    @Test("any other code is a logical failure carrying the code")
    func failure() {
        #expect(classify(#"{"code":500,"msg":"boom"}"#) == .failure(code: 500))
        #expect(classify(#"{"code":-1}"#) == .failure(code: -1))
    }

    @Test("JSON without a code (or a non-numeric one, or not an object) is a failure without a code")
    func failureWithoutCode() {
        #expect(classify(#"{"msg":"no code"}"#) == .failure(code: nil))
        #expect(classify(#"{"code":"abc"}"#) == .failure(code: nil))
        #expect(classify(#"{"code":null}"#) == .failure(code: nil))
        #expect(classify(#"{"code":200.5}"#) == .failure(code: nil))
        #expect(classify(#"[1,2,3]"#) == .failure(code: nil))
        #expect(classify(#"{"code":{"value":200}}"#) == .failure(code: nil))
    }

    @Test("a code sent as a numeric string counts as that number")
    func numericStringCode() {
        #expect(classify(#"{"code":"200"}"#) == .success(code: 200))
        #expect(classify(#"{"code":"801"}"#) == .refresh(code: 801))
        #expect(classify(#"{"code":"802"}"#) == .logout(code: 802))
    }

    @Test("an integral floating-point code counts as that number")
    func doubleCode() {
        #expect(classify(#"{"code":200.0}"#) == .success(code: 200))
    }

    @Test("an empty or non-JSON body is notJSON")
    func notJSON() {
        let r = reader()
        #expect(r.classify(nil) == .notJSON)
        #expect(classify("") == .notJSON)
        #expect(classify("<html>502 Bad Gateway</html>") == .notJSON)
        #expect(classify(#"{"code":200"#) == .notJSON)
    }

    @Test("a nested code path such as meta.code is followed")
    func nestedCodePath() {
        let r = reader(codePath: "meta.code", messagePath: "meta.message", success: [0], refresh: [40101], logout: [40102])
        #expect(classify(#"{"meta":{"code":0,"message":"ok"},"data":[]}"#, r) == .success(code: 0))
        #expect(classify(#"{"meta":{"code":40101}}"#, r) == .refresh(code: 40101))
        #expect(classify(#"{"meta":{"code":"40102"}}"#, r) == .logout(code: 40102))
        #expect(classify(#"{"meta":{"code":7}}"#, r) == .failure(code: 7))
        // A top-level `code` is not what this envelope reads.
        #expect(classify(#"{"code":0}"#, r) == .failure(code: nil))
        #expect(r.message(JSONValue.parse(#"{"meta":{"code":0,"message":"fine"}}"#)) == "fine")
    }

    @Test("several success codes are all successes")
    func severalSuccessCodes() {
        let r = reader(success: [0, 200])
        #expect(classify(#"{"code":0}"#, r) == .success(code: 0))
        #expect(classify(#"{"code":200}"#, r) == .success(code: 200))
    }

    @Test("message reads the message path and only when it is a string")
    func message() {
        let r = reader()
        #expect(r.message(JSONValue.parse(#"{"code":500,"msg":"boom"}"#)) == "boom")
        #expect(r.message(JSONValue.parse(#"{"code":500,"msg":12}"#)) == nil)
        #expect(r.message(JSONValue.parse(#"{"code":500}"#)) == nil)
        #expect(r.message(nil) == nil)
    }
}
