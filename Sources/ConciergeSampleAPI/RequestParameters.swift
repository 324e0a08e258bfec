import ConciergeCore
import Foundation
import Hummingbird

/// The parameters of one request: its query and the top-level fields of a form or JSON body.
struct RequestParameters: Sendable {
    /// Decoded query parameters, in order.
    let query: [Param]
    /// Form fields or top-level JSON fields (JSON values rendered as text), in order.
    let body: [Param]
    /// The whole body when it is JSON.
    let bodyJSON: JSONValue?

    /// Reads the query of `request` and parses `body` according to its `Content-Type`.
    /// Without a content type, a body starting with `{` is read as JSON, anything else as a form.
    init(request: Request, body: ByteBuffer) {
        query = request.decodedQuery
        let contentType = request.headers[.contentType]?.lowercased() ?? ""
        let bytes = Array(body.readableBytesView)
        let firstCharacter = bytes.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
        if contentType.contains("json") || (contentType.isEmpty && firstCharacter == UInt8(ascii: "{")) {
            bodyJSON = JSONValue.parse(bytes)
            if case .object(let fields) = bodyJSON {
                self.body = fields.keys.sorted().map { Param($0, Self.parameterText(of: fields[$0]!)) }
            } else {
                self.body = []
            }
        } else if contentType.isEmpty || contentType.contains("application/x-www-form-urlencoded") {
            bodyJSON = nil
            self.body = QueryString.parse(String(decoding: bytes, as: UTF8.self))
        } else {
            bodyJSON = nil
            self.body = []
        }
    }

    /// A top-level JSON field as a parameter value, the sample API's own way: strings verbatim,
    /// `null` as empty, numbers and booleans as Swift prints them, arrays and objects as compact
    /// JSON with sorted keys.
    ///
    /// - Important: Deliberately not Core's ``JSONValue/parameterText``: these values are what
    ///   the signature check signs over, and that check is the test oracle for Core's
    ///   `RequestSigner`, so it must not share the signer's rendering.
    static func parameterText(of value: JSONValue) -> String {
        switch value {
        case .null: ""
        case .bool(let flag): flag ? "true" : "false"
        case .int(let number): String(number)
        case .double(let number): String(number)
        case .string(let text): text
        case .array, .object: compactJSON(value)
        }
    }

    private static func compactJSON(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // A parsed JSONValue always encodes: JSON text has no non-finite numbers.
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
    }

    /// First query value named `name`.
    func queryValue(_ name: String) -> String? {
        query.first { $0.name == name }?.value
    }

    /// First body value named `name`.
    func bodyValue(_ name: String) -> String? {
        body.first { $0.name == name }?.value
    }

    /// Query value, else body value.
    func value(_ name: String) -> String? {
        queryValue(name) ?? bodyValue(name)
    }
}
