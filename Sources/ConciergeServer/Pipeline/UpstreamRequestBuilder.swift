import ConciergeCore
import Logging
import NIOCore
import NIOHTTP1

/// Step 6's inject and sign, and the request that goes upstream: the token injected,
/// the signature added, the client's end-to-end headers kept, `X-Forwarded-For` and `Via`
/// added.
enum UpstreamRequestBuilder {
    /// Headers of the client's request never forwarded as they were (`X-Forwarded-For` and
    /// `Via` go up extended).
    private static let replaced = ["host", "content-length", "x-concierge-cache", "expect", "x-forwarded-for", "via"]

    static func build(_ p: PreparedRequest, token: String?, logger: Logger) -> UpstreamRequest {
        var request = p.request
        if let token { p.config.injector.inject(token, into: &request) }
        if let signer = p.config.signer(for: p.endpoint) {
            let signed = signer.sign(&request)
            logger.debug("signed request", metadata: ["endpoint": "\(p.endpoint.name)", "string": "\(p.config.redactor.redactForm(signed))"])
        }
        var headers = HopByHopFields.endToEnd(p.originalHeaders, dropping: replaced)
        // Re-apply the rewritten fields (common headers, injected header token).
        let injectedNames = p.config.injector.headerNames
        for (name, value) in request.headers
        where !p.originalHeaders.contains(name: name) || injectedNames.contains(where: { ASCIICase.equals($0, name) }) {
            headers.replaceOrAdd(name: name, value: value)
        }
        switch (p.originalHeaders.first(name: "x-forwarded-for"), p.clientAddress) {
        case (let earlier?, let client?): headers.add(name: "X-Forwarded-For", value: "\(earlier), \(client)")
        case (let only?, nil), (nil, let only?): headers.add(name: "X-Forwarded-For", value: only)
        case (nil, nil): break
        }
        headers.add(name: "Via", value: p.originalHeaders.first(name: "via").map { "\($0), 1.1 concierge" } ?? "1.1 concierge")
        var body: UpstreamRequest.Body = .none
        let bytes = request.body.bytes
        if !bytes.isEmpty {
            body = .bytes(ByteBuffer(bytes: bytes))
            if let type = request.body.contentType, case .form = request.body {
                headers.replaceOrAdd(name: "Content-Type", value: type)
            } else if let type = request.body.contentType, !headers.contains(name: "content-type") {
                headers.replaceOrAdd(name: "Content-Type", value: type)
            }
        }
        let timeout = p.endpoint.timeout ?? p.config.settings.limits.defaultTimeout
        return UpstreamRequest(method: request.method, url: p.upstream.baseURL + request.target, headers: headers, body: body, timeout: timeout)
    }

    /// Buffered endpoints read (and may store) the body, so they ask for it unencoded: the
    /// client's own `Accept-Encoding` must not make a stored body unusable for another
    /// client, nor an envelope unreadable. Streamed pass-through keeps the client's.
    static func askForIdentity(_ request: inout UpstreamRequest) {
        request.headers.replaceOrAdd(name: "Accept-Encoding", value: "identity")
    }
}
