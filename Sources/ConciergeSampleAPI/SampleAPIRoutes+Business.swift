import ConciergeCore
import Hummingbird

/// Business data routes and the failure modes a caching proxy must cope with.
extension SampleAPIRoutes {
    /// Size of the fake item catalogue.
    static let itemCount = 1000

    func items(_ request: Request) async throws -> Response {
        let params = try await parameters(of: request)
        let limit = min(max(params.value("limit").flatMap { Int($0) } ?? 10, 0), Self.itemCount)
        let offset = min(max(params.value("offset").flatMap { Int($0) } ?? 0, 0), Self.itemCount)
        let end = min(offset + limit, Self.itemCount)
        let list: [JSONValue] = offset < end ? ((offset + 1)...end).map(Self.itemJSON) : []
        return SampleReply.success([
            "list": .array(list),
            "total": .int(Int64(Self.itemCount)),
            "served": .int(Int64(state.calls(request.uri.path))),
        ])
    }

    func item(id: String?) -> Response {
        guard let id = id.flatMap({ Int($0) }) else {
            return SampleReply.envelope(code: 404, msg: "no such item")
        }
        return SampleReply.success(["result": Self.itemJSON(id)])
    }

    func slow(_ request: Request) async throws -> Response {
        let milliseconds = min(max(Self.queryInt("ms", of: request) ?? 1000, 0), 600_000)
        try await Task.sleep(for: .milliseconds(milliseconds))
        return SampleReply.success(["slept": .int(Int64(milliseconds))])
    }

    /// `GET /api/gate?n=N`: answers once N requests have reached the gate (since the API
    /// started), or after 5 s, saying which: a batch whose sub-requests run concurrently gets
    /// `gathered: true` for each, one that runs them one after another cannot.
    func gate(_ request: Request) async throws -> Response {
        let wanted = min(max(Self.queryInt("n", of: request) ?? 2, 1), 1_000)
        _ = state.arriveAtGate()
        let limit = ContinuousClock.now + .seconds(5)
        while state.gateCount < wanted, ContinuousClock.now < limit {
            try await Task.sleep(for: .milliseconds(5))
        }
        return SampleReply.success(["gathered": .bool(state.gateCount >= wanted)])
    }

    func fail(_ request: Request) -> Response {
        let code = Self.queryInt("status", of: request).flatMap { (200...599).contains($0) ? $0 : nil } ?? 500
        return SampleReply.json(["code": -1, "msg": "upstream failure"], status: HTTPResponse.Status(code: code))
    }

    func noStore(_ request: Request) -> Response {
        SampleReply.success(["served": .int(Int64(state.calls(request.uri.path)))], headers: [.cacheControl: "no-store"])
    }

    func warning(_ request: Request) -> Response {
        let code = Self.queryInt("code", of: request) ?? 1000
        return SampleReply.envelope(code: code, msg: "warning \(code)")
    }

    /// Mirrors the request back: method, path, query, lower-cased headers and raw body.
    func echo(_ request: Request) async throws -> Response {
        var request = request
        let body = try await request.collectBody(upTo: Self.maxBufferedBodySize)
        let query = Dictionary(request.decodedQuery.map { ($0.name, JSONValue.string($0.value)) }) { _, last in last }
        return SampleReply.success([
            "method": .string(request.method.rawValue),
            "path": .string(request.uri.path),
            "query": .object(query),
            "headers": .object(request.lowercasedHeaders.mapValues { .string($0) }),
            "body": .string(String(decoding: body.readableBytesView, as: UTF8.self)),
        ])
    }

    static func itemJSON(_ id: Int) -> JSONValue {
        ["id": .int(Int64(id)), "name": .string("item \(id)")]
    }

    static func queryInt(_ name: String, of request: Request) -> Int? {
        request.decodedQuery.first { $0.name == name }.flatMap { Int($0.value) }
    }
}
