import ConciergeCore
import NIOHTTP1
import Synchronization

/// Which request fields a URL's replies vary on (`Vary`, RFC 9111 §4.1), learnt from the replies
/// stored: each variant is kept under its own key, the URL's key followed by ` vary=` and the
/// normalised values of those fields in the request (case, white space and, for lists, order do
/// not matter). In memory: after a restart the first reply of a URL teaches it again, and
/// until then its variants are misses. Bounded: past ``limit`` URLs it starts over.
final class VaryIndex: Sendable {
    private let fields = Mutex<[String: [String]]>([:])
    static let limit = 100_000

    /// The key a request reads and stores under.
    func key(_ base: String, request: HTTPHeaders) -> String {
        guard let names = fields.withLock({ $0[base] }), !names.isEmpty else { return base }
        return Self.variantKey(base, names: names, request: request)
    }

    /// Whether replies under this key are known to vary.
    func varies(_ base: String) -> Bool {
        fields.withLock { $0[base] != nil }
    }

    /// Remembers what the latest stored reply of `base` varies on (nothing: forgets).
    func record(_ base: String, fields names: [String]) {
        let sorted = Array(Set(names)).sorted()
        fields.withLock { map in
            if sorted.isEmpty {
                map.removeValue(forKey: base)
                return
            }
            if map.count >= Self.limit, map[base] == nil { map.removeAll(keepingCapacity: true) }
            map[base] = sorted
        }
    }

    static func variantKey(_ base: String, names: [String], request: HTTPHeaders) -> String {
        var key = base + " vary="
        for (i, name) in names.enumerated() {
            if i > 0 { key += "&" }
            key += name + ":" + QueryString.percentEncode(normalised(request[name]))
        }
        return key
    }

    /// A field's values as one text: every element trimmed and lowercased, white space runs
    /// made one space, the elements sorted (list order carries nothing for the fields replies
    /// vary on: `Accept-*`, `Origin`); an absent field is empty.
    static func normalised(_ values: [String]) -> String {
        values.flatMap { $0.split(separator: ",") }
            .map { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ").lowercased() }
            .filter { !$0.isEmpty }
            .sorted()
            .joined(separator: ",")
    }
}
