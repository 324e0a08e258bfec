import ConciergeCore
import GRDB

/// Which entries an invalidation removes.
///
/// A new kind of selector is a case here, its line in ``kind`` (its JSON and the way the
/// cache finds its entries, one of the four ``Selection``s) and its line in ``decoders``;
/// nothing else in the cache switches over the kinds.
public enum InvalidationCriteria: Sendable {
    /// Unanchored regular-expression search over the key text.
    case pattern(String)
    /// Entries of these endpoints: every entry (`.everyone`), only shared ones
    /// (`.sharedOnly`), or shared ones plus one user's (`.sharedAnd(user)`).
    case endpoints([String], scope: EndpointScope)
    /// Every entry of one user (logout).
    case user(String)
    /// Everything.
    case all
    /// Entries carrying any of these tags (user-scoped ones too).
    case tags([String])
    /// The entries the inner criteria select, marked stale instead of removed (soft purge).
    indirect case soft(InvalidationCriteria)

    public enum EndpointScope: Sendable {
        case everyone
        case sharedOnly
        case sharedAnd(String)
    }

    /// How the cache finds the entries a selector selects.
    enum Selection: Sendable {
        /// Every entry.
        case all
        /// The entries whose endpoint and user the filter selects: found by the writer's row
        /// facts (and SQL over the rows the key index's loader has not read yet), and in the
        /// hot tier by the same filter.
        case rows(RowFilter)
        /// The entries whose key the pattern matches: a scan of the keys off the writer.
        case keys(pattern: String)
        /// The entries carrying any of the tags: the tag table's index (and the hot tier's
        /// entries' own tags).
        case tags([String])
    }

    /// The one switch over the kinds of selector: each kind's JSON (as the fleet's invalidation
    /// log and the cache's journal store it) and how the cache finds its entries (a soft purge
    /// finds what its inner criteria find).
    private var kind: (json: JSONValue, selection: Selection) {
        switch self {
        case .pattern(let source):
            return (["pattern": .string(source)], .keys(pattern: source))
        case .user(let user):
            return (["user": .string(user)], .rows(RowFilter(endpoints: nil, users: .only(user))))
        case .all:
            return (["all": true], .all)
        case .tags(let tags):
            return (["tags": .array(tags.map(JSONValue.string))], .tags(tags))
        case .soft(let inner):
            let innerKind = inner.kind
            return (["soft": innerKind.json], innerKind.selection)
        case .endpoints(let names, let scope):
            let scopeValue: JSONValue
            let users: RowFilter.Users
            switch scope {
            case .everyone: (scopeValue, users) = ("everyone", .any)
            case .sharedOnly: (scopeValue, users) = ("shared", .shared)
            case .sharedAnd(let user): (scopeValue, users) = (["shared_and": .string(user)], .sharedAnd(user))
            }
            return (["endpoints": .array(names.map(JSONValue.string)), "scope": scopeValue],
                    .rows(RowFilter(endpoints: names, users: users)))
        }
    }

    /// Reads criteria back from their JSON object: the first of these that reads it decides.
    private static let decoders: [@Sendable ([String: JSONValue]) -> InvalidationCriteria?] = [
        { fields in
            guard case .string(let source)? = fields["pattern"] else { return nil }
            return .pattern(source)
        },
        { fields in
            guard case .string(let user)? = fields["user"] else { return nil }
            return .user(user)
        },
        { fields in fields["all"] == .bool(true) ? .all : nil },
        { fields in
            guard case .array(let items)? = fields["tags"] else { return nil }
            return .tags(items.compactMap(\.stringValue))
        },
        { fields in
            guard let inner = fields["soft"], case .object = inner else { return nil }
            return InvalidationCriteria(json: inner.serialized).map { .soft($0) }
        },
        { fields in
            guard case .array(let items)? = fields["endpoints"] else { return nil }
            let names = items.compactMap(\.stringValue)
            switch fields["scope"] {
            case .string("everyone")?: return .endpoints(names, scope: .everyone)
            case .string("shared")?: return .endpoints(names, scope: .sharedOnly)
            case .object(let scope)?: return scope["shared_and"]?.stringValue.map { .endpoints(names, scope: .sharedAnd($0)) }
            default: return nil
            }
        },
    ]

    /// How the cache finds the entries these criteria select.
    var selection: Selection { kind.selection }

    /// Whether the entry is selected; a pattern is matched by ``KeyPattern`` scans instead
    /// (``CacheStore/invalidate(_:)``), never here.
    func matches(_ entry: CacheEntry) -> Bool {
        switch selection {
        case .all: return true
        case .rows(let filter): return filter.matches(endpoint: entry.endpoint, userID: entry.userID)
        case .tags(let tags): return entry.tags.contains { tags.contains($0) }
        case .keys: return false
        }
    }

    /// Whether the hot tier's entries must be gone through to find those selected (not for a
    /// pattern: its keys are scanned separately, ``HotTier/keys(matching:until:)``).
    var selectsByEntry: Bool {
        if case .keys = selection { return false }
        return true
    }
}

extension InvalidationCriteria {
    /// The criteria as JSON text, as the fleet's invalidation log stores them.
    public var json: String { kind.json.serialized }

    /// Criteria read back from ``json``; `nil` for a text this version does not know.
    public init?(json text: String) {
        guard case .object(let fields)? = JSONValue.parse(text),
              let criteria = Self.decoders.lazy.compactMap({ $0(fields) }).first else { return nil }
        self = criteria
    }
}

/// Entries selected by their endpoint and their user: what the writer's ``RowFacts`` hold of
/// each row, what SQL selects among the rows it does not hold yet, and what an entry in
/// memory says.
struct RowFilter: Sendable {
    enum Users: Sendable {
        /// Every entry, shared or a user's.
        case any
        /// Shared entries only.
        case shared
        /// Shared entries and this user's.
        case sharedAnd(String)
        /// This user's entries only.
        case only(String)
    }

    /// `nil`: every endpoint.
    var endpoints: [String]?
    var users: Users

    func matches(endpoint: String, userID: String?) -> Bool {
        if let endpoints, !endpoints.contains(endpoint) { return false }
        switch users {
        case .any: return true
        case .shared: return userID == nil
        case .sharedAnd(let user): return userID == nil || userID == user
        case .only(let user): return userID == user
        }
    }

    /// The filter as an SQL condition over `cache_entry`.
    var sql: (condition: String, arguments: StatementArguments) {
        var conditions: [String] = []
        var arguments = StatementArguments()
        if let endpoints {
            conditions.append("endpoint IN (\(Array(repeating: "?", count: max(1, endpoints.count)).joined(separator: ",")))")
            arguments += StatementArguments(endpoints.isEmpty ? [""] : endpoints)
        }
        switch users {
        case .any: break
        case .shared: conditions.append("user_id IS NULL")
        case .sharedAnd(let user):
            conditions.append("(user_id IS NULL OR user_id = ?)")
            arguments += [user]
        case .only(let user):
            conditions.append("user_id = ?")
            arguments += [user]
        }
        return (conditions.isEmpty ? "1" : conditions.joined(separator: " AND "), arguments)
    }
}
