import Crypto
import Foundation

/// The ids of `per_client` instances (docs/sessions.md): chosen by the caller, checked here,
/// stored and logged only as a digest (the store key) or masked.
public enum SessionInstance {
    /// Whether `id` is a valid instance id: 16-128 characters of `A-Z a-z 0-9 . _ ~ -`.
    public static func isValidID(_ id: String) -> Bool {
        (16...128).contains(id.utf8.count) && id.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
                || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "~") || c == UInt8(ascii: "-")
        }
    }

    /// The store key of an instance: its session's name, `#` and a digest of its id (the id
    /// itself is never stored).
    public static func key(session: String, id: String) -> String {
        let digest = SHA256.hash(data: Array(id.utf8))
        return session + "#" + digest.prefix(12).map { String(format: "%02x", $0) }.joined()
    }
}
