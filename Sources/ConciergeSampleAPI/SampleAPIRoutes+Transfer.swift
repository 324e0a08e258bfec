import ConciergeCore
import Crypto
import Hummingbird

/// Streamed upload and ranged, streamed download.
extension SampleAPIRoutes {
    /// Bytes per chunk written by downloads.
    static let downloadChunkSize = 64 * 1024
    /// Default download size when `size` is not given.
    static let defaultDownloadSize = 1_048_576

    /// Hashes the body chunk by chunk as it arrives; never holds it whole.
    func upload(_ request: Request) async throws -> Response {
        var hasher = SHA256()
        var size = 0
        for try await chunk in request.body {
            size += chunk.readableBytes
            chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
        }
        return SampleReply.success(["size": .int(Int64(size)), "sha256": .string(HexEncoding.lowercase(hasher.finalize()))])
    }

    /// `size` deterministic bytes (byte i is `i % 251`), honouring a single byte range.
    func download(_ request: Request) -> Response {
        let size = max(Self.queryInt("size", of: request) ?? Self.defaultDownloadSize, 0)
        var headers: HTTPFields = [.contentType: "application/octet-stream", .acceptRanges: "bytes"]
        switch ByteRangeRequest(header: request.headers[.range], resourceSize: size) {
        case .whole:
            return Response(status: .ok, headers: headers, body: Self.deterministicBody(0..<size))
        case .partial(let range):
            headers[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(size)"
            return Response(status: .partialContent, headers: headers, body: Self.deterministicBody(range))
        case .unsatisfiable:
            headers[.contentRange] = "bytes */\(size)"
            return Response(status: .rangeNotSatisfiable, headers: headers)
        }
    }

    /// 64 KB plus one period of the byte pattern, so any chunk is a slice of it.
    private static let downloadPattern: [UInt8] = (0..<(downloadChunkSize + 251)).map { UInt8($0 % 251) }

    private static func deterministicBody(_ range: Range<Int>) -> ResponseBody {
        ResponseBody(contentLength: range.count) { writer in
            var offset = range.lowerBound
            while offset < range.upperBound {
                let length = min(downloadChunkSize, range.upperBound - offset)
                let start = offset % 251
                try await writer.write(ByteBuffer(bytes: downloadPattern[start..<(start + length)]))
                offset += length
            }
            try await writer.finish(nil)
        }
    }
}
