import ConciergeCore
import Hummingbird
import HTTPTypes
import Logging
import NIOCore

/// Turns every error reply of the admin listener into JSON `{"error": ...}` (docs/hardening.md):
/// thrown `HTTPError`s keep their status and message, unknown routes are 404, and any
/// other error (a failed SQLite write, say) is 500 with a short description, logged.
struct AdminErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response: Response
        do {
            response = try await next(request, context)
        } catch let error as HTTPError {
            return Self.reply(error.status, error.body ?? Self.defaultMessage(error.status, request))
        } catch let error as any HTTPResponseError {
            return Self.reply(error.status, Self.defaultMessage(error.status, request))
        } catch {
            logger.error("admin request failed", metadata: ["method": "\(request.method)", "path": "\(request.uri.path)", "error": "\(error)"])
            return Self.reply(.internalServerError, "internal error: \(error)")
        }
        // A reply with an error status and no body (from a handler or Hummingbird) gets one.
        if response.status.code >= 400, response.headers[.contentType] == nil {
            return Self.reply(response.status, Self.defaultMessage(response.status, request), headers: response.headers)
        }
        return response
    }

    static func defaultMessage(_ status: HTTPResponse.Status, _ request: Request) -> String {
        switch status.code {
        case 404: return "no route \(request.method) \(request.uri.path)"
        case 405: return "method \(request.method) not allowed on \(request.uri.path)"
        default: return status.reasonPhrase.isEmpty ? "HTTP \(status.code)" : status.reasonPhrase.lowercased()
        }
    }

    static func reply(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        fields[.contentLength] = nil
        return Response(status: status, headers: fields,
                        body: .init(byteBuffer: ByteBuffer(bytes: JSONValue.object(["error": .string(message)]).serializedBytes)))
    }
}
