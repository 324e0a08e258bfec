import Foundation

/// A comma-separated field value (`Connection`, `Transfer-Encoding`, `Vary`; RFC 9110 §5.6.1)
/// as its elements: split on commas (nothing between two commas is no element), white space
/// trimmed, lowercased (an element of white space only is an empty string).
public enum FieldList {
    public static func elements(_ value: some StringProtocol) -> [String] {
        value.split(separator: ",", omittingEmptySubsequences: true).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
    }
}
