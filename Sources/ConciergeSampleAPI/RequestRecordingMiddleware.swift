import Hummingbird

/// Records every request in `SampleAPIState` before it is answered.
///
/// Buffers the body (so handlers and the record see the same bytes) except on paths whose body
/// must stay streamed, which are recorded with an empty body.
struct RequestRecordingMiddleware<Context: RequestContext>: RouterMiddleware {
    let state: SampleAPIState
    let streamedPathPrefixes: [String]
    let maxBufferedBodySize: Int

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var request = request
        let path = request.uri.path
        var bodyText = ""
        if !streamedPathPrefixes.contains(where: { path.hasPrefix($0) }) {
            let body = try await request.collectBody(upTo: maxBufferedBodySize)
            bodyText = String(decoding: body.readableBytesView, as: UTF8.self)
        }
        state.record(
            SampleRequestRecord(
                method: request.method.rawValue,
                path: path,
                query: request.decodedQuery,
                headers: request.lowercasedHeaders,
                body: bodyText
            )
        )
        return try await next(request, context)
    }
}
