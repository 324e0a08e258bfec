import ConciergeCore
import ConciergeTestSupport
import Foundation
import Testing

/// `GET /cache/entries` paging with a cursor written as an HTML form or a URL library writes
/// it (a space as `+`).
@Suite("Entries cursor")
struct EntriesCursorTests {
    /// `application/x-www-form-urlencoded`: a space as `+`, other reserved bytes escaped.
    static func formEncode(_ text: String) -> String {
        text.split(separator: " ", omittingEmptySubsequences: false).map { QueryString.percentEncode(String($0)) }.joined(separator: "+")
    }

    @Test("a cursor form-encoded with + for its spaces continues the listing: every entry once, over three pages")
    func formEncodedCursorPages() async throws {
        try await ConciergeTestRig.with { rig in
            for i in 0..<5 { _ = try await rig.get("/api/items?limit=\(i)") }
            var keys: [String] = []
            var cursor: String? = nil
            var pages = 0
            repeat {
                let query = "limit=2" + (cursor.map { "&cursor=\(Self.formEncode($0))" } ?? "")
                let page = try await rig.admin(.GET, "/cache/entries?\(query)")
                guard case .array(let entries)? = page.json?[path: "entries"] else { Issue.record("no entries"); break }
                keys += entries.compactMap { $0[path: "key"]?.stringValue }
                cursor = page.json?[path: "next"]?.stringValue
                if let cursor { #expect(Self.formEncode(cursor).contains("+"), "the cursor (a key) holds a space: \(cursor)") }
                pages += 1
            } while cursor != nil && pages < 10
            #expect(keys.count == 5 && Set(keys).count == 5)
            #expect(pages == 3)
        }
    }
}
