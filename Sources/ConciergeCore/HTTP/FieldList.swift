/// A comma-separated field value (`Connection`, `Transfer-Encoding`, `Vary`; RFC 9110 §5.6.1)
/// as its elements: split on commas (nothing between two commas is no element), optional white
/// space (space and tab) trimmed, ASCII letters lowercased (an element of white space only is an
/// empty string). Read by bytes: it runs on every upstream reply (`Connection`).
public enum FieldList {
    public static func elements(_ value: some StringProtocol) -> [String] {
        var value = String(value)
        return value.withUTF8 { bytes in
            var elements: [String] = []
            forEachElement(of: bytes) { element in
                elements.append(String(decoding: element.lazy.map(ASCIICase.lowered), as: UTF8.self))
                return false
            }
            return elements
        }
    }

    /// Whether `value`'s elements include `token` (ASCII case ignored), as
    /// `elements(value).contains(token.lowercased())` would say, without building them.
    public static func lists(_ token: String, in value: String) -> Bool {
        var (token, value) = (token, value)
        return token.withUTF8 { token in
            value.withUTF8 { value in
                forEachElement(of: value) { element in
                    element.count == token.count && zip(element, token).allSatisfy { ASCIICase.lowered($0) == ASCIICase.lowered($1) }
                }
            }
        }
    }

    /// Calls `body` with each element's bytes, white space trimmed (nothing between two commas
    /// is no element), until it returns `true`; whether it did.
    @discardableResult
    private static func forEachElement(of value: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> Bool) -> Bool {
        var next = 0
        while next < value.count {
            var end = next
            while end < value.count, value[end] != UInt8(ascii: ",") { end += 1 }
            var start = next
            next = end + 1
            guard end > start else { continue }
            while start < end, isWhiteSpace(value[start]) { start += 1 }
            while start < end, isWhiteSpace(value[end - 1]) { end -= 1 }
            if body(UnsafeBufferPointer(rebasing: value[start..<end])) { return true }
        }
        return false
    }

    private static func isWhiteSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }
}
