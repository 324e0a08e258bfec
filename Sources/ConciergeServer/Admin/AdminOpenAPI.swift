import HTTPTypes
import Hummingbird
import NIOCore

/// The admin API's OpenAPI 3.1 document, `docs/openapi.yaml`, built into the binary (through
/// the `openapi.yaml` resource link next to this file) so an installed daemon serves it at
/// `GET /openapi.yaml` without the source tree.
enum AdminOpenAPI {
    static let document: [UInt8] = PackageResources.openapi_yaml

    static func response() -> Response {
        Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: ByteBuffer(bytes: document)))
    }

    /// The upper-case methods the document declares for each path.
    static let methodsByPath: [String: [String]] = declaredMethods(in: String(decoding: document, as: UTF8.self))

    /// The methods declared for `path`: its own entry, else the first templated one it fits
    /// (`/sessions/{name}`: a `{…}` segment matches any one segment).
    static func declaredMethods(of path: String) -> [String]? {
        if let methods = methodsByPath[path] { return methods }
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        return methodsByPath.first { template, _ in
            let parts = template.split(separator: "/", omittingEmptySubsequences: false)
            return template.contains("{") && parts.count == segments.count
                && zip(parts, segments).allSatisfy { $0.hasPrefix("{") && !$1.isEmpty || $0 == $1 }
        }?.value
    }

    /// Reads `paths:` of a document laid out as `docs/openapi.yaml` is: a path at indent 2,
    /// its operations at indent 4.
    static func declaredMethods(in text: String) -> [String: [String]] {
        let methods: Set<Substring> = ["get", "put", "post", "delete", "patch", "head", "options", "trace"]
        var result: [String: [String]] = [:]
        var inPaths = false
        var path: String? = nil
        for line in text.split(separator: "\n") {
            if !line.hasPrefix(" ") {
                inPaths = line == "paths:"
                path = nil
            } else if inPaths, line.hasPrefix("  /"), line.hasSuffix(":") {
                path = String(line.dropFirst(2).dropLast())
                result[path!] = []
            } else if inPaths, let path, line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":"),
                      methods.contains(line.dropFirst(4).dropLast()) {
                result[path, default: []].append(line.dropFirst(4).dropLast().uppercased())
            }
        }
        return result
    }
}

/// A path of the document called with a method it does not declare is 405 with `Allow`
/// (HEAD comes with GET), as JSON `{"error": ...}`. Only what the router itself did not find
/// is answered here, so a route missing from the document still works.
struct AdminMethodMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            guard let declared = AdminOpenAPI.declaredMethods(of: request.uri.path), !declared.isEmpty else { throw error }
            let allowed = declared.contains("GET") && !declared.contains("HEAD") ? declared + ["HEAD"] : declared
            let body = #"{"error":"method \#(request.method.rawValue) not allowed on \#(request.uri.path) (allowed: \#(allowed.joined(separator: ", ")))"}"#
            return Response(status: .methodNotAllowed, headers: [.contentType: "application/json", .allow: allowed.joined(separator: ", ")],
                            body: .init(byteBuffer: ByteBuffer(string: body)))
        }
    }
}
