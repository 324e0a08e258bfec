@testable import ConciergeServer
import ConciergeCore
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// `docs/openapi.yaml` as the daemon serves it, and the router agreeing with it.
/// (schemathesis in `.ci/run` checks every operation of the document against a live daemon.)
@Suite("Admin API OpenAPI document")
struct AdminOpenAPITests {
    static let documentPath = ProcessTests.repoRoot + "/docs/openapi.yaml"

    @Test("GET /openapi.yaml needs no token and serves docs/openapi.yaml byte for byte, as YAML")
    func servedWithoutToken() async throws {
        let file = try String(contentsOfFile: Self.documentPath, encoding: .utf8)
        try await ConciergeTestRig.with { rig in
            let reply = try await rig.admin(.GET, "/openapi.yaml", token: nil)
            #expect(reply.status == 200)
            #expect(reply.header("Content-Type") == "application/yaml")
            #expect(reply.text == file)
        }
    }

    @Test("the document declares every admin route, each method of each path is routed (never 404 or 405)")
    func everyDeclaredOperationIsRouted() async throws {
        let declared = AdminOpenAPI.methodsByPath
        #expect(Set(declared.keys) == ["/health", "/openapi.yaml", "/metrics", "/stats", "/cache/invalidate", "/cache/entries",
                                       "/session", "/sessions", "/sessions/{name}", "/sessions/{name}/instances/{id}",
                                       "/environment", "/reload", "/fleet", "/ui"])
        #expect(declared["/session"] == ["GET", "PUT", "DELETE"])
        try await ConciergeTestRig.with { rig in
            for (path, methods) in declared {
                for method in methods {
                    // A templated path with a sample of each part: the session `default`, an invalid instance id (400).
                    let concrete = path.replacingOccurrences(of: "{name}", with: "default").replacingOccurrences(of: "{id}", with: "x")
                    let reply = try await rig.admin(HTTPMethod(rawValue: method), concrete)
                    #expect(reply.status != 404 && reply.status != 405, "\(method) \(path) answered \(reply.status)")
                }
            }
        }
    }

    @Test("a method a path does not declare is 405 with Allow and a JSON error; an unknown path is a JSON 404")
    func methodNotAllowed() async throws {
        try await ConciergeTestRig.with { rig in
            let patch = try await rig.admin(HTTPMethod(rawValue: "PATCH"), "/session")
            #expect(patch.status == 405)
            #expect(patch.header("Allow") == "GET, PUT, DELETE, HEAD")
            #expect(patch.json?[path: "error"]?.stringValue?.contains("PATCH") == true)
            let health = try await rig.admin(.POST, "/health", token: nil)
            #expect(health.status == 405)
            #expect(health.header("Allow") == "GET, HEAD")
            let templated = try await rig.admin(.PUT, "/sessions/default")
            #expect(templated.status == 405)
            #expect(templated.header("Allow") == "GET, DELETE, HEAD")
            let unknown = try await rig.admin(.GET, "/nope")
            #expect(unknown.status == 404)
            #expect(unknown.json?[path: "error"] != nil)
        }
    }

    @Test("PUT /session rejects tokens and user ids of the wrong JSON type; an unknown environment is 404")
    func bodyTypes() async throws {
        try await ConciergeTestRig.with { rig in
            let numericRefresh: JSONValue = ["access_token": "tok-123456789", "refresh_token": 5]
            let boolUser: JSONValue = ["access_token": "tok-123456789", "user_id": true]
            let numericUser: JSONValue = ["access_token": "tok-123456789", "user_id": 42]
            let rejected1 = try await rig.admin(.PUT, "/session", json: numericRefresh)
            #expect(rejected1.status == 400)
            let rejected2 = try await rig.admin(.PUT, "/session", json: boolUser)
            #expect(rejected2.status == 400)
            let accepted = try await rig.admin(.PUT, "/session", json: numericUser)
            #expect(accepted.status == 200)
            #expect(accepted.json?[path: "user_id"] == "42")
            #expect(try await rig.admin(.PUT, "/environment", json: ["environment": "nowhere"]).status == 404)
        }
    }
}
