import ConciergeCore
import Foundation
import Testing
import Yams

/// `docs/configuration.md` names every key the loader accepts. The key list comes from the
/// loader itself (``ConfigLoader/schemaKeys(yaml:)``), explored section by section, so a key
/// added to the schema fails this test until it is documented.
@Suite("Configuration keys are documented")
struct ConfigKeysDocumentedTests {
    static let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    @Test("every key path the loader accepts appears in docs/configuration.md as `path`")
    func everyKeyDocumented() throws {
        let doc = try String(contentsOfFile: Self.repoRoot + "/docs/configuration.md", encoding: .utf8)
        let keys = Self.acceptedKeyPaths()
        // The exploration reaches the nested sections, not only the top level.
        #expect(keys.contains("endpoints[].cache.ttl"))
        #expect(keys.contains("session.inject[].header"))
        #expect(keys.contains("hooks[].events"))
        let missing = keys.filter { !doc.contains("`\($0)`") }.sorted()
        #expect(missing.isEmpty, "not in docs/configuration.md: \(missing.joined(separator: ", "))")
    }

    @Test("docs/openapi.yaml (served at GET /openapi.yaml) is valid YAML describing every admin route")
    func openAPIParses() throws {
        let text = try String(contentsOfFile: Self.repoRoot + "/docs/openapi.yaml", encoding: .utf8)
        let document = try #require(try Yams.load(yaml: text) as? [String: Any])
        let paths = try #require(document["paths"] as? [String: Any])
        for route in ["/health", "/stats", "/cache/invalidate", "/cache/entries", "/session", "/environment", "/reload", "/fleet"] {
            #expect(paths[route] != nil, "\(route) is described")
        }
    }

    /// Every `section.key` of the schema: starts from a minimal valid file and, for each key the
    /// loader allows but the file lacks, adds it as `{}` or `[{}]` when that makes the loader
    /// read a new mapping there, until nothing new appears. Errors in the file do not matter:
    /// the loader reads every section whatever it found before.
    static func acceptedKeyPaths() -> Set<String> {
        var document: JSONValue = ["upstreams": ["release": "http://127.0.0.1:9000"],
                                   "endpoints": [["name": "e", "match": "GET /e"]]]
        var tried = Set<String>()
        var schema = ConfigLoader.schemaKeys(yaml: document.serialized)
        var grew = true
        while grew {
            grew = false
            for (section, keys) in schema {
                for key in keys.sorted() {
                    let path = section.isEmpty ? key : "\(section).\(key)"
                    guard schema[path] == nil, schema[path + "[]"] == nil, tried.insert(path).inserted else { continue }
                    for candidate: JSONValue in [[:], [[:]]] {
                        guard let trial = Self.adding(candidate, at: path, to: document) else { break }
                        let trialSchema = ConfigLoader.schemaKeys(yaml: trial.serialized)
                        if trialSchema[path] != nil || trialSchema[path + "[]"] != nil {
                            document = trial
                            schema = trialSchema
                            grew = true
                            break
                        }
                    }
                    if grew { break }
                }
                if grew { break }
            }
        }
        var paths = Set<String>()
        for (section, keys) in schema {
            for key in keys { paths.insert(section.isEmpty ? key : "\(section).\(key)") }
        }
        return paths
    }

    /// `document` with `value` set at a schema path (`a.b[].c`: `[]` is the first item), or nil
    /// when something is already there.
    static func adding(_ value: JSONValue, at path: String, to document: JSONValue) -> JSONValue? {
        func set(_ segments: ArraySlice<Substring>, in node: JSONValue) -> JSONValue? {
            guard let first = segments.first, case .object(var members) = node else { return nil }
            let isList = first.hasSuffix("[]")
            let name = String(isList ? first.dropLast(2) : first)
            if segments.count == 1 {
                guard members[name] == nil else { return nil }
                members[name] = value
                return .object(members)
            }
            guard let child = members[name] else { return nil }
            if isList {
                guard case .array(var items) = child, let item = items.first, let updated = set(segments.dropFirst(), in: item) else { return nil }
                items[0] = updated
                members[name] = .array(items)
            } else {
                guard let updated = set(segments.dropFirst(), in: child) else { return nil }
                members[name] = updated
            }
            return .object(members)
        }
        return set(ArraySlice(path.split(separator: ".")), in: document)
    }
}
