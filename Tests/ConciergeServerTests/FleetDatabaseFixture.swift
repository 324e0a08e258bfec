@testable import ConciergeCore
import ConciergeStorage
import ConciergeTestSupport
import Logging

/// A `FleetDatabase` on a throwaway PostgreSQL cluster, its pool running, for tests that talk
/// to the fleet's database directly (no daemon); the cluster is stopped whatever `body` does.
enum FleetDatabaseFixture {
    static func with(node: String, _ body: (FleetDatabase, PostgresCluster) async throws -> Void) async throws {
        let cluster = try await PostgresCluster.start()
        let address = try ConciergeConfig.PostgresAddress.parse(cluster.url).get()
        let database = try FleetDatabase(config: ConciergeConfig.Fleet(postgres: address, node: node), logger: Logger(label: node))
        let running = Task { await database.client.run() }
        do {
            try await body(database, cluster)
        } catch {
            running.cancel()
            await cluster.stop()
            throw error
        }
        running.cancel()
        await cluster.stop()
    }
}
