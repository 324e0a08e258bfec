import ConciergeCore
import Testing

/// ``Runtime/generation``: what connections compare to keep the configuration and routes they
/// read without taking the runtime's lock.
@Suite("Runtime generation")
struct RuntimeGenerationTests {
    static let yaml = """
        upstreams:
          debug: http://127.0.0.1:9001
          release: http://127.0.0.1:9002
        environment: debug
        endpoints:
          - name: items
            match: GET /api/items
        """

    @Test("a reload and an environment switch each change the generation; a refused switch does not")
    func changesWithEveryChange() throws {
        let config = try ConfigLoader.parse(yaml: Self.yaml)
        let runtime = Runtime(config: config)
        let start = runtime.generation
        runtime.replace(with: config)
        let afterReload = runtime.generation
        #expect(afterReload != start)
        #expect(runtime.setEnvironment("release"))
        #expect(runtime.generation != afterReload)
        let afterSwitch = runtime.generation
        #expect(!runtime.setEnvironment("staging"))
        #expect(runtime.generation == afterSwitch)
        #expect(runtime.environment == "release")
    }
}
