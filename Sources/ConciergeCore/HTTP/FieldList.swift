/// A comma-separated field value (`Connection`, `Transfer-Encoding`, `Vary`; RFC 9110 §5.6.1)
/// as its elements: split on commas (nothing between two commas is no element), optional white
/// space (space and tab) trimmed, ASCII letters lowercased (an element of white space only is an
/// empty string). Read by bytes: it runs on every upstream reply (`Connection`).
public enum FieldList {
    public static func elements(_ value: some StringProtocol) -> [String] {
        var elements: [String] = []
        for part in Substring(value).utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: true) {
            var start = part.startIndex
            var end = part.endIndex
            while start < end, isWhiteSpace(part[start]) { start = part.index(after: start) }
            while start < end, isWhiteSpace(part[part.index(before: end)]) { end = part.index(before: end) }
            elements.append(String(decoding: part[start..<end].lazy.map(ASCIICase.lowered), as: UTF8.self))
        }
        return elements
    }

    /// Whether `value`'s elements include `token` (ASCII case ignored), as
    /// `elements(value).contains(token.lowercased())` would say, without building them.
    public static func lists(_ token: String, in value: String) -> Bool {
        var (token, value) = (token, value)
        return token.withUTF8 { token in value.withUTF8 { value in lists(token, in: value) } }
    }

    private static func lists(_ token: UnsafeBufferPointer<UInt8>, in value: UnsafeBufferPointer<UInt8>) -> Bool {
        var next = 0
        while next < value.count {
            var end = next
            while end < value.count, value[end] != UInt8(ascii: ",") { end += 1 }
            var start = next
            next = end + 1
            guard end > start else { continue }  // nothing between two commas: no element
            while start < end, isWhiteSpace(value[start]) { start += 1 }
            while start < end, isWhiteSpace(value[end - 1]) { end -= 1 }
            guard end - start == token.count else { continue }
            var same = true
            for i in 0..<token.count where ASCIICase.lowered(value[start + i]) != ASCIICase.lowered(token[i]) {
                same = false
                break
            }
            if same { return true }
        }
        return false
    }

    private static func isWhiteSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }
}
