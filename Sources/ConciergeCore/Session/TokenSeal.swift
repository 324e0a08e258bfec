import Crypto
import Foundation

/// Seals tokens before they leave the machine (the fleet's PostgreSQL rows): AES-GCM with the
/// 32-byte key of `fleet.key_file`, so a dump of the database reveals no token. Without a key
/// the text is stored in clear, marked so (the daemon warns at start).
public struct TokenSeal: Sendable {
    /// The key's bytes (`SymmetricKey` is not `Sendable`; one is made per use).
    private let keyBytes: [UInt8]?

    public var seals: Bool { keyBytes != nil }

    public init(keyBytes: [UInt8]?) {
        precondition(keyBytes.map { $0.count == 32 } ?? true, "AES-256 takes a 32-byte key")
        self.keyBytes = keyBytes
    }

    private var key: SymmetricKey? { keyBytes.map { SymmetricKey(data: $0) } }

    /// Reads the key file: 32 bytes raw, as 64 hex digits or as base64; it must not be readable
    /// by group or others.
    public static func load(keyFile path: String?) throws(SealError) -> TokenSeal {
        guard let path else { return TokenSeal(keyBytes: nil) }
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              let data = FileManager.default.contents(atPath: path) else {
            throw SealError("fleet.key_file \(path): cannot be read")
        }
        if let mode = attributes[.posixPermissions] as? Int, mode & 0o077 != 0 {
            throw SealError("fleet.key_file \(path): mode \(String(mode, radix: 8)) lets others read it; chmod 600")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let bytes: [UInt8]
        if data.count == 32 {
            bytes = Array(data)
        } else if text.count == 64, let hex = Self.hex(text) {
            bytes = hex
        } else if let decoded = Data(base64Encoded: text), decoded.count == 32 {
            bytes = Array(decoded)
        } else {
            throw SealError("fleet.key_file \(path): expected 32 bytes (raw, 64 hex digits or base64)")
        }
        return TokenSeal(keyBytes: bytes)
    }

    /// `gcm1:` + base64(nonce ‖ ciphertext ‖ tag), or `plain:` + the token without a key.
    public func seal(_ token: String) -> String {
        guard let key else { return "plain:" + token }
        // AES-GCM with a random nonce cannot fail for a valid 256-bit key.
        guard let box = try? AES.GCM.seal(Array(token.utf8), using: key), let combined = box.combined else {
            preconditionFailure("AES-GCM sealing failed")
        }
        return "gcm1:" + combined.base64EncodedString()
    }

    /// The token back; an error when the text was sealed with another key or is damaged.
    public func open(_ text: String) throws(SealError) -> String {
        if text.hasPrefix("plain:") { return String(text.dropFirst(6)) }
        guard text.hasPrefix("gcm1:") else { throw SealError("a stored token in an unknown form") }
        guard let key else { throw SealError("a stored token is sealed and this node has no fleet.key_file") }
        guard let data = Data(base64Encoded: String(text.dropFirst(5))),
              let box = try? AES.GCM.SealedBox(combined: data),
              let plain = try? AES.GCM.open(box, using: key) else {
            throw SealError("a stored token does not open with this node's fleet.key_file (another key?)")
        }
        return String(decoding: plain, as: UTF8.self)
    }

    private static func hex(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let h = digit(high), let l = digit(low) else { return nil }
            out.append(h << 4 | l)
        }
        return out
    }

    private static func digit(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    public struct SealError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
