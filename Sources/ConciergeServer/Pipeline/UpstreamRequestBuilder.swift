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
    /// The headers that choose a session (`Concierge-Session-Name`, the default
    /// `per_client.header`) never reach the upstream either.
    private static let replaced = ["host", "content-length", "x-concierge-cache", "expect", "x-forwarded-for", "via",
                                   "concierge-session-name", "concierge-session"]

    /// ``replaced``, with ``UnkeyedRequestFields`` too where a reply may be stored: on a cached
    /// endpoint (in `mode: http` for `GET` and `HEAD`, the methods it stores), but those the
    /// endpoint keys (`cache.key_headers`).
    private static let replacedOnCached = replaced + UnkeyedRequestFields.names

    private static func droppedFields(_ p: PreparedRequest) -> [String] {
        if let header = p.config.settings.session.perClient?.header, !ASCIICase.equals(header, lowercase: "concierge-session") {
            return droppedKnownFields(p) + [header.lowercased()]
        }
        return droppedKnownFields(p)
    }

    private static func droppedKnownFields(_ p: PreparedRequest) -> [String] {
        let endpoint = p.endpoint
        guard endpoint.isCacheable, !endpoint.httpCaching || p.request.method == "GET" || p.request.method == "HEAD" else { return replaced }
        let keyed = endpoint.cache.keyHeaders
        return keyed.isEmpty ? replacedOnCached : replaced + UnkeyedRequestFields.dropped(keyHeaders: keyed)
    }

    /// - Parameter askingForIdentity: `Accept-Encoding: identity` replaces the client's (see
    ///   ``UpstreamExchange/request(_:_:)``).
    static func build(_ p: PreparedRequest, token: String?, logger: Logger, askingForIdentity: Bool = false) -> UpstreamRequest {
        var request = p.request
        if let token { p.config.injector.inject(token, into: &request) }
        if let signer = p.config.signer(for: p.endpoint) {
            let signed = signer.sign(&request)
            logger.debug("signed request", metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "string": "\(p.config.redactor.redactForm(signed))"]))
        }
        // The fields as a list, wrapped once at the end: `HTTPHeaders.add` checks every name
        // again, `replaceOrAdd` rewrites the list.
        var fields = HopByHopFields.endToEndFields(p.originalHeaders, dropping: droppedFields(p), reserving: 4)
        func replaceOrAdd(_ name: String, _ value: String) {
            fields.removeAll { ASCIICase.equals($0.0, name) }
            fields.append((name, value))
        }
        // Re-apply the rewritten fields (common headers, injected header token).
        let injectedNames = p.config.injector.headerNames
        for (name, value) in request.headers
        where !p.originalHeaders.contains(name: name) || injectedNames.contains(where: { ASCIICase.equals($0, name) }) {
            replaceOrAdd(name, value)
        }
        switch (p.originalHeaders.first(name: "x-forwarded-for"), p.clientAddress) {
        case (let earlier?, let client?): fields.append(("X-Forwarded-For", "\(earlier), \(client)"))
        case (let only?, nil), (nil, let only?): fields.append(("X-Forwarded-For", only))
        case (nil, nil): break
        }
        fields.append(("Via", p.originalHeaders.first(name: "via").map { "\($0), 1.1 concierge" } ?? "1.1 concierge"))
        var body: UpstreamRequest.Body = .none
        let bytes = request.body.bytes
        if !bytes.isEmpty {
            body = .bytes(ByteBuffer(bytes: bytes))
            if let type = request.body.contentType, case .form = request.body {
                replaceOrAdd("Content-Type", type)
            } else if let type = request.body.contentType, !fields.contains(where: { ASCIICase.equals($0.0, lowercase: "content-type") }) {
                replaceOrAdd("Content-Type", type)
            }
        }
        // Buffered endpoints read (and may store) the body, so they ask for it unencoded: the
        // client's own `Accept-Encoding` must not make a stored body unusable for another
        // client, nor an envelope unreadable. Streamed pass-through keeps the client's.
        if askingForIdentity { replaceOrAdd("Accept-Encoding", "identity") }
        let timeout = p.endpoint.timeout ?? p.config.settings.limits.defaultTimeout
        return UpstreamRequest(method: request.method, base: p.upstream.baseURL, target: request.target, headers: HTTPHeaders(fields),
                               body: body, timeout: timeout)
    }
}
