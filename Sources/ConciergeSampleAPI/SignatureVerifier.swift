import Crypto
import Foundation

/// Checks request signatures the way a typical business API does: over the canonical,
/// sorted, RFC 3986-encoded parameter string, with HMAC-SHA256, HMAC-SHA1 or salted MD5.
struct SignatureVerifier: Sendable {
    /// Which algorithm and encoding produced a matching signature.
    struct Match: Sendable, Equatable {
        let algorithm: String
        let encoding: String
    }

    let secret: String

    /// `k=v&k=v` over every parameter but `signature`, each name and value RFC 3986-encoded,
    /// sorted by encoded name then encoded value.
    static func canonicalString(of params: [SampleParam]) -> String {
        let encoded: [SampleParam] = params
            .filter { $0.name != "signature" }
            .map { SampleParam(PercentCoding.encodeRFC3986($0.name), PercentCoding.encodeRFC3986($0.value)) }
        let sorted = encoded.sorted { lhs, rhs in
            lhs.name != rhs.name ? lhs.name < rhs.name : lhs.value < rhs.value
        }
        return sorted.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
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
