import ConciergeCore
import HTTPTypes
import Hummingbird

/// The admin listener's `Host` check (docs/hardening.md): the same ``HostPolicy`` as the proxy,
/// before authentication, so a page on another origin that resolves to 127.0.0.1 cannot
/// even probe the admin API. Unix-socket listeners are not reachable from a browser and
/// are not checked.
struct AdminHostMiddleware<Context: RequestContext>: RouterMiddleware {
    let runtime: Runtime

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let config = runtime.current
        guard case .tcp = config.settings.listen.admin else { return try await next(request, context) }
        // HTTPTypes keeps the first `Host` as the authority and any further ones as fields: two
        // are refused (400), as on the proxy listener.
        let hostFields = (request.head.authority.map { [$0] } ?? []) + request.headers[values: Self.host]
        switch config.hostPolicy.verdict(hostFields: hostFields, requiresHost: true) {
        case .allowed:
            return try await next(request, context)
        case .malformed(let why):
            return AdminHostMiddleware.error(.badRequest, why)
        case .forbidden(let name):
            return AdminHostMiddleware.error(.forbidden, "host not allowed: \(HTTPFieldSyntax.printable(name))")
        }
    }

    static var host: HTTPField.Name { HTTPField.Name("Host")! }

    static func error(_ status: HTTPResponse.Status, _ message: String) -> Response {
        let body = JSONValue.object(["error": .string(message)]).serializedBytes
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}
