import Foundation

/// How a `Range` request header applies to a resource of known size (RFC 9110 §14).
/// Only a single `bytes=` range is honoured; anything else is ignored and the whole resource served.
enum ByteRangeRequest: Equatable {
    /// No usable `Range` header: serve everything with 200.
    case whole
    /// Serve these bytes with 206.
    case partial(Range<Int>)
    /// The range lies outside the resource: 416.
    case unsatisfiable

    init(header: String?, resourceSize size: Int) {
        let header = header?.trimmingCharacters(in: .whitespaces) ?? ""
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard header.lowercased().hasPrefix("bytes="), !spec.contains(","), let dash = spec.firstIndex(of: "-") else {
            self = .whole
            return
        }
        let firstText = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let lastText = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        switch (Int(firstText), Int(lastText)) {
        case (nil, let suffixLength?) where firstText.isEmpty && suffixLength >= 0:
            // bytes=-n: the last n bytes
            guard suffixLength > 0, size > 0 else {
                self = .unsatisfiable
                return
            }
            self = .partial(max(0, size - suffixLength)..<size)
        case (let first?, nil) where lastText.isEmpty && first >= 0:
            // bytes=a-
            self = first < size ? .partial(first..<size) : .unsatisfiable
        case (let first?, let last?) where first >= 0 && last >= first:
            // bytes=a-b
            self = first < size ? .partial(first..<min(last + 1, size)) : .unsatisfiable
        default:
            self = .whole
        }
    }
}
