import Foundation
import NIOCore
import NIOHTTP1

/// Where a request head ends within one read, and whether the request decoder reads a next
/// request after it: what a read must show before its bytes may stand for a request without
/// being parsed again (the proxy listener's repeated hits). The `headboundary` fuzz target
/// checks both against NIO's decoder.
public enum RequestHeadBoundary {
    /// Whether the first blank line (`LF CR LF` or `LF LF`: a line end right after a line end)
    /// ends exactly at the end of `raw`. A head ends at its first blank line, so such a read
    /// holds at most one head and nothing after it.
    public static func endsAtItsOnlyBlankLine(_ raw: UnsafeRawBufferPointer) -> Bool {
        let lf = UInt8(ascii: "\n"), cr = UInt8(ascii: "\r")
        let count = raw.count
        guard let base = raw.baseAddress, count >= 2, raw[count - 1] == lf else { return false }
        // Line ends found with memchr (a line at a time, not a byte).
        var i = 0
        while i < count, let found = memchr(base + i, Int32(lf), count - i) {
            let at = base.distance(to: UnsafeRawPointer(found))
            if at + 1 < count, raw[at + 1] == lf { return at + 2 == count }
            if at + 2 < count, raw[at + 1] == cr, raw[at + 2] == lf { return at + 3 == count }
            i = at + 1
        }
        return false
    }

    public static func endsAtItsOnlyBlankLine(_ bytes: ByteBuffer) -> Bool {
        bytes.withUnsafeReadableBytes { endsAtItsOnlyBlankLine($0) }
    }

    /// Whether the decoder reads a next request after this one: not after a request that ends
    /// the connection (it refuses anything more) or asks for an upgrade (it stops parsing).
    public static func decodingGoesOn(after head: HTTPRequestHead) -> Bool {
        head.isKeepAlive && !head.headers.contains(name: "upgrade")
    }
}
