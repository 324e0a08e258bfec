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

    private static func isWhiteSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }
}
