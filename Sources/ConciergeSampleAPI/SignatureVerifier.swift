import ConciergeCore
import Crypto
import Foundation

/// Checks request signatures the way a typical business API does: over the canonical,
/// sorted, RFC 3986-encoded parameter string, with HMAC-SHA256, HMAC-SHA1 or salted MD5.
///
/// - Important: This is an independent implementation of the signing scheme
///   (docs/configuration.md, `signing`): it is the test oracle for Core's `RequestSigner`, so
///   it shares none of its code: not `QueryString.canonical`, not `QueryString.percentEncode`,
///   not its digests. Were both sides built on one helper, a bug in that helper would sign and
///   verify alike and pass. Keep it separate even where it looks like a duplicate.
struct SignatureVerifier: Sendable {
    /// Which algorithm and encoding produced a matching signature.
    struct Match: Sendable, Equatable {
        let algorithm: String
        let encoding: String
    }

    let secret: String

    /// `k=v&k=v` over every parameter but `signature`, each name and value RFC 3986-encoded,
    /// sorted by encoded name then encoded value.
    static func canonicalString(of params: [Param]) -> String {
        let encoded: [(name: String, value: String)] = params
            .filter { $0.name != "signature" }
            .map { (encodeRFC3986($0.name), encodeRFC3986($0.value)) }
        let sorted = encoded.sorted { lhs, rhs in
            lhs.name != rhs.name ? lhs.name < rhs.name : lhs.value < rhs.value
        }
        return sorted.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
    }

    /// RFC 3986: unreserved `A–Z a–z 0–9 - . _ ~` kept, every other UTF-8 byte written as
    /// `%XX` in upper-case hex (a space becomes `%20`).
    static func encodeRFC3986(_ text: String) -> String {
        let hexDigits = Array("0123456789ABCDEF".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.append(byte)
            default:
                output += [UInt8(ascii: "%"), hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The algorithm that yields `signature` over `canonical`, or `nil` if none does.
    /// A `+` turned into a space by form decoding of an unescaped base64 value is tolerated.
    func match(signature: String, canonical: String) -> Match? {
        let key = SymmetricKey(data: Array(secret.utf8))
        let message = Array(canonical.utf8)
        let candidates: [(algorithm: String, digest: [UInt8])] = [
            ("hmac-sha256", Array(HMAC<SHA256>.authenticationCode(for: message, using: key))),
            ("hmac-sha1", Array(HMAC<Insecure.SHA1>.authenticationCode(for: message, using: key))),
            ("md5-salted", Array(Insecure.MD5.hash(data: Array((canonical + secret).utf8)))),
        ]
        let presented = [signature, signature.replacingOccurrences(of: " ", with: "+")]
        for candidate in candidates {
            if presented.contains(HexEncoding.lowercase(candidate.digest)) {
                return Match(algorithm: candidate.algorithm, encoding: "hex")
            }
            if presented.contains(Data(candidate.digest).base64EncodedString()) {
                return Match(algorithm: candidate.algorithm, encoding: "base64")
            }
        }
        return nil
    }
}
