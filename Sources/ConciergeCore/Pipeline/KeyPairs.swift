/// The kept pairs of one part of a cache key (the query, a form body, a JSON body's members),
/// normalised or percent-encoded into one scratch buffer, then written ordered by name: pairs
/// of one name keep the order they were added in (a stable sort), so `a=1&a=2` and `a=2&a=1`
/// stay two keys.
struct KeyPairs {
    /// A pair's place in the scratch bytes: the name is `start..<equals`, the value `equals..<end`.
    struct Span {
        var start: Int
        var equals: Int
        var end: Int
        /// The value is a JSON literal (a number, `true`, `null`, an array or object), written
        /// after `:=`; a string's text is written after `=`.
        var literal: Bool
    }

    private var scratch: [UInt8] = []
    private var spans: [Span] = []

    init(scratch capacity: Int, pairs: Int) {
        scratch.reserveCapacity(capacity)
        spans.reserveCapacity(pairs)
    }

    /// A pair as the client wrote it (`name=value`), normalised (``QueryString/appendNormalizedPair(_:to:)``).
    mutating func add(wire: UnsafeBufferPointer<UInt8>) {
        let start = scratch.count
        let equals = QueryString.appendNormalizedPair(wire, to: &scratch)
        spans.append(Span(start: start, equals: equals, end: scratch.count, literal: false))
    }

    /// A decoded pair, both sides percent-encoded.
    mutating func add(name: String, value: String) {
        let start = scratch.count
        QueryString.appendPercentEncoded(name, to: &scratch)
        let equals = scratch.count
        QueryString.appendPercentEncoded(value, to: &scratch)
        spans.append(Span(start: start, equals: equals, end: scratch.count, literal: false))
    }

    /// A JSON member: its decoded name and either a string's decoded UTF-8 bytes or the
    /// value's literal text (`literal`), both percent-encoded.
    mutating func add<Value: Sequence<UInt8>>(name: String, value: Value, literal: Bool) {
        let start = scratch.count
        QueryString.appendPercentEncoded(name, to: &scratch)
        let equals = scratch.count
        QueryString.appendPercentEncoded(bytes: value, to: &scratch)
        spans.append(Span(start: start, equals: equals, end: scratch.count, literal: literal))
    }

    /// Writes `name=value` (or `name:=literal`) pairs joined by `&`, ordered by name.
    mutating func write(into out: inout TextBuilder) {
        scratch.withUnsafeBufferPointer { bytes in
            func piece(_ range: Range<Int>) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: bytes[range]) }
            if spans.count > 1 {
                // `sort` is not documented as stable: equal names fall back to the order of
                // addition, which is the order of the spans' bytes in the scratch buffer.
                spans.sort { a, b in
                    let names = Self.order(piece(a.start..<a.equals), piece(b.start..<b.equals))
                    return names != 0 ? names < 0 : a.start < b.start
                }
            }
            for (index, span) in spans.enumerated() {
                if index > 0 { out.append("&" as StaticString) }
                out.append(piece(span.start..<span.equals))
                out.append(span.literal ? ":=" as StaticString : "=" as StaticString)
                out.append(piece(span.equals..<span.end))
            }
        }
    }

    /// Byte order of `a` and `b`: negative, zero or positive.
    static func order(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
        for i in 0..<min(a.count, b.count) where a[i] != b[i] { return Int(a[i]) - Int(b[i]) }
        return a.count - b.count
    }
}
