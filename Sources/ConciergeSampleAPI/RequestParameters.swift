import Hummingbird

/// The parameters of one request: its query and the top-level fields of a form or JSON body.
struct RequestParameters: Sendable {
    /// Decoded query parameters, in order.
    let query: [SampleParam]
    /// Form fields or top-level JSON fields (JSON values rendered as text), in order.
    let body: [SampleParam]
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
                self.body = fields.keys.sorted().map { SampleParam($0, fields[$0]!.parameterText) }
            } else {
                self.body = []
            }
        } else if contentType.isEmpty || contentType.contains("application/x-www-form-urlencoded") {
            bodyJSON = nil
            self.body = PercentCoding.decodeForm(String(decoding: bytes, as: UTF8.self))
        } else {
            bodyJSON = nil
            self.body = []
        }
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
