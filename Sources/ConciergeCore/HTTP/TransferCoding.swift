/// How a request body is framed, read from its `Transfer-Encoding` fields (RFC 9112 §6.1).
public enum TransferCoding: Equatable, Sendable {
    /// No `Transfer-Encoding`: the body, if any, is framed by `Content-Length`.
    case none
    /// Exactly `chunked`: the only coding Concierge forwards.
    case chunked
    /// Anything else (`gzip, chunked`, `identity, chunked`, `xchunked`, …): 501.
    case unsupported(String)

    /// Classifies the values of every `Transfer-Encoding` field of a request.
    public static func of(_ values: [String]) -> TransferCoding {
        guard !values.isEmpty else { return .none }
        let codings = values.flatMap(FieldList.elements)
        if codings == ["chunked"] { return .chunked }
        return .unsupported(codings.joined(separator: ", "))
    }
}
