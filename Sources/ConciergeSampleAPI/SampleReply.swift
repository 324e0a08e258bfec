import ConciergeCore
import Hummingbird

/// Builders for the replies of the sample API.
enum SampleReply {
    /// A business envelope `{"code": code, "msg": msg, "data": data}` (HTTP 200 unless given).
    static func envelope(
        code: Int,
        msg: String = "ok",
        data: JSONValue = [:],
        status: HTTPResponse.Status = .ok,
        headers: HTTPFields = [:]
    ) -> Response {
        json(["code": .int(Int64(code)), "msg": .string(msg), "data": data], status: status, headers: headers)
    }

    /// A success envelope (code 200).
    static func success(_ data: JSONValue = [:], headers: HTTPFields = [:]) -> Response {
        envelope(code: 200, msg: "ok", data: data, headers: headers)
    }

    /// Any JSON document as `application/json`.
    static func json(_ value: JSONValue, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: value.serializedBytes)))
    }

    /// Plain text.
    static func text(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status,
            headers: [.contentType: "text/plain; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: text))
        )
    }
}
