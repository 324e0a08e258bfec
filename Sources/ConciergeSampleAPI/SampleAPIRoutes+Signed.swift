import ConciergeCore
import Hummingbird

/// `/api/signed`: verifies the request signature over the canonical parameter string.
extension SampleAPIRoutes {
    func signed(_ request: Request) async throws -> Response {
        guard let secret = configuration.signingSecret else {
            return SampleReply.success(["algorithm": "none", "encoding": "none"])
        }
        let params = try await parameters(of: request)
        let all = request.method == .post ? params.query + params.body : params.query
        let canonical = SignatureVerifier.canonicalString(of: all)
        guard let signature = all.first(where: { $0.name == "signature" })?.value,
            let match = SignatureVerifier(secret: secret).match(signature: signature, canonical: canonical)
        else {
            return SampleReply.envelope(code: 1003, msg: "bad signature: expected over \(canonical)")
        }
        return SampleReply.success(["algorithm": .string(match.algorithm), "encoding": .string(match.encoding)])
    }
}
