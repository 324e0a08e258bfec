/// `validate:`: checks that a success reply has the declared shape.
public struct ResponseValidator: Sendable {
    public let rules: [(path: String, type: EndpointPolicy.ExpectedType)]

    public init(rules: [(path: String, type: EndpointPolicy.ExpectedType)]) {
        self.rules = rules
    }

    /// `nil` when the body conforms, else "<path> <problem>".
    public func problem(in body: JSONValue) -> String? {
        for rule in rules {
            guard let value = body[path: rule.path] else { return "\(rule.path) is missing" }
            let ok: Bool
            switch (rule.type, value) {
            case (.present, _): ok = true
            case (.object, .object), (.array, .array), (.string, .string), (.bool, .bool), (.null, .null): ok = true
            case (.number, .int), (.number, .double): ok = true
            default: ok = false
            }
            if !ok { return "\(rule.path) is \(value.typeName), expected \(rule.type.rawValue)" }
        }
        return nil
    }
}
