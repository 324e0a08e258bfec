/// The YAML the integration tests start from: the sample API as `debug` upstream, ports 0,
/// the SQLite file in the test's own directory, the sample API's session conventions.
public enum TestConfig {
    public static let defaultEndpoints = """
        - { name: login, match: "POST /api/login" }
        - { name: refreshToken, match: "POST /api/token/refresh" }
        - { name: userInfo, match: "GET /api/user/info", login: required, cache: { ttl: 5m } }
        - { name: updateProfile, match: "POST /api/user/update", login: required, invalidates: [userInfo] }
        - { name: alwaysExpired, match: "GET /api/always-expired", login: required }
        - { name: itemList, match: "GET,POST /api/items", cache: { ttl: 60s } }
        - { name: item, match: "GET /api/items/{id}", cache: { ttl: 60s } }
        - { name: slow, match: "GET /api/slow", timeout: 2s }
        - { name: echo, match: "/api/echo" }
        - { name: businessError, match: "GET /api/business-error", cache: { ttl: 60s } }
        - { name: nonJSON, match: "GET /api/nonjson", cache: { ttl: 60s } }
        - { name: empty, match: "GET /api/empty", cache: { ttl: 60s } }
        - { name: noStore, match: "GET /api/nostore", cache: { ttl: 60s } }
        - { name: fail, match: "GET /api/fail", cache: { ttl: 60s } }
        - { name: download, match: "GET /api/download/*", envelope: false }
        - { name: upload, match: "POST /api/upload", envelope: false }
        """

    public static let defaultSession = """
        session:
          inject:
            - query: accessToken
          capture:
            endpoint: login
            access_token: data.result.accessToken
            refresh_token: data.result.refreshToken
            user_id: data.result.userId
          refresh:
            method: POST
            path: /api/token/refresh
            body: { refreshToken: "{refresh_token}" }
            access_token: data.result.accessToken
            refresh_token: data.result.refreshToken
            max_replays: 3
        """

    public static func yaml(apiPort: Int, directory: String, endpoints: String, extra: String) -> String {
        var endpoints = endpoints
        if !endpoints.contains("name: login") { endpoints += "\n- name: login\n  match: POST /api/login" }
        let indented = endpoints.split(separator: "\n", omittingEmptySubsequences: false).map { "  " + $0 }.joined(separator: "\n")
        var sections = """
            listen:
              proxy: 127.0.0.1:0
              admin: 127.0.0.1:0
            admin:
              token: \(ConciergeTestRig.adminToken)
            storage:
              path: \(directory)/concierge.sqlite
              max_bytes: 64MB
              memory_bytes: 8MB
            upstreams:
              debug: http://127.0.0.1:\(apiPort)
              down: http://127.0.0.1:1
            environment: debug
            common:
              headers: { X-Requested-With: "concierge-test" }
              params: { platform: linux, app_version: "1.4.0" }
            log:
              level: debug
            endpoints:
            \(indented)

            """
        if !extra.contains("session:") { sections += defaultSession + "\n" }
        sections += extra
        return sections
    }
}
