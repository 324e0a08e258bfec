@testable import ConciergeCore
import Testing

@Suite("ResponseValidator")
struct ResponseValidatorTests {
    private let body = JSONValue.parse("""
        {"code":200,"data":{"result":{"id":42,"score":4.5,"name":"Ada","active":true,"nickname":null,"tags":["a"]},
         "list":[{"id":1},{"id":2}]}}
        """)!

    private func problem(_ rules: [(String, EndpointPolicy.ExpectedType)]) -> String? {
        ResponseValidator(rules: rules.map { (path: $0.0, type: $0.1) }).problem(in: body)
    }

    @Test("a conforming body has no problem (object, array, number, string, bool, null)")
    func conforming() {
        #expect(problem([("data.result", .object), ("data.result.id", .number), ("data.list", .array),
                         ("data.result.name", .string), ("data.result.active", .bool), ("data.result.nickname", .null)]) == nil)
    }

    @Test("no rules means no problem")
    func noRules() {
        #expect(problem([]) == nil)
    }

    @Test("number accepts integers and doubles")
    func numberIntAndDouble() {
        #expect(problem([("data.result.id", .number)]) == nil)
        #expect(problem([("data.result.score", .number)]) == nil)
        #expect(problem([("code", .number)]) == nil)
    }

    @Test("a numeric string is not a number")
    func numericStringIsNotNumber() {
        let v = ResponseValidator(rules: [(path: "id", type: .number)])
        #expect(v.problem(in: ["id": "42"]) == "id is string, expected number")
    }

    @Test("present accepts any value, including null, but not a missing one")
    func present() {
        #expect(problem([("data.result.nickname", .present)]) == nil)
        #expect(problem([("data.result", .present)]) == nil)
        #expect(problem([("data.result.tags.0", .present)]) == nil)
        #expect(problem([("data.result.email", .present)]) == "data.result.email is missing")
    }

    @Test("a missing path is reported as '<path> is missing'")
    func missingPath() {
        #expect(problem([("data.result.email", .string)]) == "data.result.email is missing")
        #expect(problem([("data.list.5", .object)]) == "data.list.5 is missing")
        #expect(problem([("data.result.id.deeper", .number)]) == "data.result.id.deeper is missing")
    }

    @Test("a wrong type is reported as '<path> is <type>, expected <type>'")
    func wrongType() {
        #expect(problem([("data.list", .object)]) == "data.list is array, expected object")
        #expect(problem([("data.result", .array)]) == "data.result is object, expected array")
        #expect(problem([("data.result.id", .string)]) == "data.result.id is number, expected string")
        #expect(problem([("data.result.active", .number)]) == "data.result.active is bool, expected number")
        #expect(problem([("data.result.nickname", .string)]) == "data.result.nickname is null, expected string")
        #expect(problem([("data.result.name", .null)]) == "data.result.name is string, expected null")
    }

    @Test("array elements are addressed by index")
    func arrayIndex() {
        #expect(problem([("data.list.1.id", .number)]) == nil)
        #expect(problem([("data.list.0", .object)]) == nil)
    }

    @Test("the first failing rule is reported")
    func firstFailure() {
        #expect(problem([("data.result", .object), ("data.list", .string), ("data.missing", .present)])
            == "data.list is array, expected string")
    }
}
