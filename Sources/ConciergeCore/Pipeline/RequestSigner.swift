import Crypto
import Foundation

/// Request signing: timestamp and nonce added, then a signature over the canonical
/// sorted params (the cache key's form, signature excluded) where the params go.
public struct RequestSigner: Sendable {
    public let config: SigningConfig

    public init(config: SigningConfig) {
        self.config = config
    }

    /// The string that is signed for these params.
    public func canonicalString(_ params: [Param]) -> String {
        QueryString.canonical(params.filter { $0.name != config.param })
    }

    public func signature(of string: String) -> String {
        let key = SymmetricKey(data: Array(config.secret.utf8))
        let digest: [UInt8]
        switch config.algorithm {
        case .hmacSHA256: digest = Array(HMAC<SHA256>.authenticationCode(for: Array(string.utf8), using: key))
        case .hmacSHA1: digest = Array(HMAC<Insecure.SHA1>.authenticationCode(for: Array(string.utf8), using: key))
        case .md5Salted: digest = Array(Insecure.MD5.hash(data: Array((string + config.secret).utf8)))
        }
        switch config.encoding {
        case .hex: return digest.map { String(format: "%02x", $0) }.joined()
        case .base64: return Data(digest).base64EncodedString()
        }
    }

    /// Adds timestamp, nonce and signature to the request; returns the signed string (for the debug log).
    @discardableResult
    public func sign(_ request: inout ProxyRequest, now: Date = Date(), nonce: String = UUID().uuidString.lowercased()) -> String {
        if let t = config.timestampParam { request.setParam(t, String(Int(now.timeIntervalSince1970))) }
        if let n = config.nonceParam { request.setParam(n, nonce) }
        let params = request.query + (request.paramsGoInQuery ? [] : request.body.params)
        let string = canonicalString(params)
        request.setParam(config.param, signature(of: string))
        return string
    }
}
