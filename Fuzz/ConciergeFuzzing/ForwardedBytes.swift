import ConciergeCore

extension FuzzTargets {
    /// The request Concierge forwards equals the client's outside Concierge's additions: the
    /// common params and the token are inserted, nothing else in the query or the body is
    /// decoded, re-encoded or re-serialised.
    ///
    /// Input: the first byte picks the method and the body's type; up to the first NUL byte
    /// is the query (printable ASCII only, as a target's parser lets through), the rest the body.
    public static func forwardedBytes(_ data: [UInt8]) {
        guard let flags = data.first else { return }
        let rest = data.dropFirst()
        let cut = rest.firstIndex(of: 0) ?? rest.endIndex
        let query = String(decoding: rest[rest.startIndex..<cut].filter { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "#") }, as: UTF8.self)
        let body = Array(rest[cut...].dropFirst())
        let method = flags & 1 == 0 ? "GET" : "POST"
        let contentType = ["application/json", "application/x-www-form-urlencoded", "text/plain"][Int(flags >> 1) % 3]
        let received = ProxyRequest(method: method, target: "/f?" + query, body: RequestBody.parse(body, contentType: contentType))
        var request = received
        CommonParamsStep(common: fuzzCommon).apply(to: &request)
        TokenInjector(points: [.query(name: "accessToken")]).inject("tok", into: &request)
        _ = CacheKey.make(method: method, upstreamBaseURL: "http://u", path: request.path, params: request.query, body: request.body,
                          excluding: ["accessToken"], userID: nil, version: 1)
        checkQuery(client: query, forwarded: request.target)
        checkBody(client: body, forwarded: request.body.bytes, received: received.body)
    }

    static let fuzzCommon = ConciergeConfig.Common(headers: [:], params: [("platform", "linux"), ("app_version", "1.4.0")])
    static let addedNames: Set<String> = ["platform", "app_version", "accessToken"]

    /// The client's pairs, in order and as written (empty ones aside), then Concierge's.
    static func checkQuery(client: String, forwarded: String) {
        guard forwarded.hasPrefix("/f?") else { preconditionFailure("the path changed") }
        let sent = forwarded.dropFirst(3).split(separator: "&").map(String.init)
        let kept = client.split(separator: "&").map(String.init).filter { QueryString.parse($0).first?.name != "accessToken" }
        guard sent.count >= kept.count, Array(sent.prefix(kept.count)) == kept else {
            preconditionFailure("the client's query changed: \(client) → \(forwarded)")
        }
        for added in sent.dropFirst(kept.count) where !addedNames.contains(QueryString.parse(added).first?.name ?? "") {
            preconditionFailure("a pair that is neither the client's nor Concierge's: \(added)")
        }
    }

    /// The client's body with, at one place, Concierge's members or pairs inserted.
    static func checkBody(client: [UInt8], forwarded: [UInt8], received: RequestBody) {
        switch received {
        case .empty, .opaque:
            if case .opaque = received, forwarded != client { preconditionFailure("an opaque body changed") }
        case .form, .json:
            let prefix = zip(client, forwarded).prefix { $0 == $1 }.count
            guard forwarded.count >= client.count, forwarded.suffix(client.count - prefix).elementsEqual(client[prefix...]) else {
                preconditionFailure("the client's body changed beyond an insertion")
            }
            if case .json(let object) = received {
                guard let edited = JSONObjectText(forwarded) else { preconditionFailure("the edited body is no longer one object") }
                let names = Set(object.members.map(\.name))
                for member in edited.members where !names.contains(member.name) && !addedNames.contains(member.name) {
                    preconditionFailure("a member that is neither the client's nor Concierge's: \(member.name)")
                }
            }
        }
    }
}
