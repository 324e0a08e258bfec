import ConciergeCore
@testable import ConciergeServer
import NIOCore
import Testing

/// ``EncodedHit/bytes(allocator:inlineBody:)``: what a hit writes, by itself.
@Suite("Hit bytes")
struct EncodedHitBytesTests {
    @Test("a hit's bytes: head, Cache-Status and Age, the blank line, a small body in the same buffer, a large one after it")
    func hitBytes() {
        let head = ByteBuffer(string: "HTTP/1.1 200 OK\r\nX-Cache: HIT\r\nContent-Length: 2\r\n")
        func hit(body: String, ttl: Int, age: Int) -> EncodedHit {
            EncodedHit(head: head, body: ByteBuffer(string: body), ttl: ttl, age: age, status: 200, report: RequestReport())
        }
        let small = hit(body: "{}", ttl: 59, age: 1234567).bytes(allocator: ByteBufferAllocator(), inlineBody: 16)
        #expect(String(buffer: small.head) == "HTTP/1.1 200 OK\r\nX-Cache: HIT\r\nContent-Length: 2\r\nCache-Status: concierge; hit; ttl=59\r\nAge: 1234567\r\n\r\n{}")
        #expect(small.body == nil)
        let large = hit(body: String(repeating: "x", count: 17), ttl: Int.max, age: 0).bytes(allocator: ByteBufferAllocator(), inlineBody: 16)
        #expect(String(buffer: large.head) == "HTTP/1.1 200 OK\r\nX-Cache: HIT\r\nContent-Length: 2\r\nCache-Status: concierge; hit; ttl=\(Int.max)\r\nAge: 0\r\n\r\n")
        #expect(large.body.map { String(buffer: $0) } == String(repeating: "x", count: 17))
        let negative = hit(body: "", ttl: -3, age: 0).bytes(allocator: ByteBufferAllocator(), inlineBody: 16)
        #expect(String(buffer: negative.head).hasSuffix("ttl=-3\r\nAge: 0\r\n\r\n"))
    }

}
