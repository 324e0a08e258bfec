import ConciergeCore
@testable import ConciergeServer
import Foundation
import NIOCore
import NIOHTTP1

/// The scripted upstream of ``MissPathRig``: what it answers depends on the request alone (its
/// query's `k`, `s` and `v`, and the token sent), so two rigs given the same requests get the
/// same replies.
enum MissPathScript {
    /// What the upstream does, chosen by the query's `k`.
    enum Kind: Int, CaseIterable, Sendable {
        /// `{"code":200,"data":{"v":…,"token":…}}`.
        case success
        /// A business error code: passed on, never cached.
        case businessError
        /// The expiry code for an odd token number (`at-1`, `at-3`, …), success for an even one:
        /// renew, then replay with the new token.
        case expiredOnce
        /// The expiry code whatever the token: renewals until `max_replays`.
        case alwaysExpired
        /// Warning code 901: an event and a logout.
        case warningLogout
        /// Warning code 902: an event only.
        case warningEvent
        /// The logout code.
        case logoutCode
        /// A body that is not JSON.
        case notJSON
        /// An empty body.
        case empty
        /// Success with fields the proxy replaces or the cache treats apart: `X-Cache`,
        /// `Cache-Status`, `Set-Cookie`, `Surrogate-Key`, `Cache-Control`, `Age`.
        case successWithFields
        /// No reply in time.
        case timeout
        /// The upstream cannot be reached.
        case unreachable
    }

    /// The statuses `s` picks from.
    static let statuses = [200, 201, 203, 404, 500, 502, 503]

    static func reply(_ request: UpstreamRequest) -> Result<UpstreamResponse, UpstreamFailure> {
        let items = URLComponents(string: request.url)?.queryItems ?? []
        func query(_ name: String) -> String? { items.first { $0.name == name }?.value }
        if request.url.hasSuffix("/token/refresh") { return .success(refreshed(request)) }
        let kind = query("k").flatMap(Int.init).flatMap(Kind.init(rawValue:)) ?? .success
        let status = query("s").flatMap(Int.init).map { statuses[abs($0) % statuses.count] } ?? 200
        let token = query("accessToken") ?? ""
        let value = JSONValue.string(query("v") ?? "")
        func json(_ code: Int, _ extra: HTTPHeaders = [:]) -> Result<UpstreamResponse, UpstreamFailure> {
            var headers: HTTPHeaders = ["Content-Type": "application/json"]
            headers.add(contentsOf: extra)
            let body: JSONValue = ["code": .int(Int64(code)), "msg": "m", "data": ["v": value, "token": .string(token)]]
            return .success(UpstreamResponse(status: status, headers: headers, body: ByteBuffer(bytes: body.serializedBytes)))
        }
        switch kind {
        case .success: return json(200)
        case .businessError: return json(1001)
        case .expiredOnce: return json(tokenNumber(token) % 2 == 1 ? 801 : 200)
        case .alwaysExpired: return json(801)
        case .warningLogout: return json(901)
        case .warningEvent: return json(902)
        case .logoutCode: return json(802)
        case .notJSON:
            return .success(UpstreamResponse(status: status, headers: ["Content-Type": "text/plain"], body: ByteBuffer(string: "not json \(query("v") ?? "")")))
        case .empty:
            return .success(UpstreamResponse(status: status, headers: [:], body: ByteBuffer()))
        case .successWithFields:
            return json(200, ["X-Cache": "HIT", "Cache-Status": "upstream; hit", "Set-Cookie": "a=b", "Surrogate-Key": "s1 s2",
                              "Cache-Control": "max-age=5", "Age": "3"])
        case .timeout: return .failure(.timeout)
        case .unreachable: return .failure(.unreachable("scripted"))
        }
    }

    /// The token endpoint: `rt-N` gives `at-(N+1)` and `rt-(N+1)`.
    private static func refreshed(_ request: UpstreamRequest) -> UpstreamResponse {
        var text = ""
        if case .bytes(let body) = request.body { text = String(buffer: body) }
        let number = text.split(separator: "rt-").dropFirst().first.map { Int($0.prefix { $0.isNumber }) ?? 0 } ?? 0
        let body: JSONValue = ["code": 200, "data": ["accessToken": .string("at-\(number + 1)"), "refreshToken": .string("rt-\(number + 1)")]]
        return UpstreamResponse(status: 200, headers: ["Content-Type": "application/json"], body: ByteBuffer(bytes: body.serializedBytes))
    }

    private static func tokenNumber(_ token: String) -> Int {
        Int(token.split(separator: "-").last ?? "") ?? 0
    }
}
